// Package spiretest runs a real SPIRE server (and agents) for tests, from the
// binaries hack/spire.sh builds (`make spire`). HYPERFLEET_SPIRE_DIR names
// their directory; `make test` sets it. The processes are spirelocal's.
package spiretest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/spirelocal"
)

// DirEnv names the directory holding spire-server and spire-agent.
const DirEnv = spirelocal.DirEnv

// Dir returns the directory holding the SPIRE binaries, or fails the test
// (never skips it: a suite that silently skipped SPIRE would pass untested).
func Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(DirEnv)
	if dir == "" {
		t.Fatalf("%s is not set: build SPIRE with `make spire` and run `HYPERFLEET_SPIRE_DIR=$(hack/spire.sh --print-dir) go test ...`, or run `make test`", DirEnv)
	}
	if err := spirelocal.CheckDir(dir); err != nil {
		t.Fatalf("%s=%v", DirEnv, err)
	}
	return dir
}

// AdminInstallation and AdminID: the server lets the SVID of AdminID call
// its admin API over TCP; a client of AdminInstallation may mint it.
const AdminInstallation = spirelocal.AdminInstallation

// AdminID is the admin workload's SPIFFE ID in trustDomain.
func AdminID(trustDomain string) string { return spirelocal.AdminID(trustDomain) }

// Server is a running spire-server with the sqlite datastore, the join_token
// node attestor and the memory key manager (spirelocal.Server: SocketPath,
// Port, TrustDomain).
type Server struct {
	*spirelocal.Server
}

// StartServer starts a server in a temporary directory and waits until its
// admin socket answers; the test's cleanup stops it.
func StartServer(t testing.TB, trustDomain string) *Server {
	t.Helper()
	return startServer(t, trustDomain, nil)
}

func startServer(t testing.TB, trustDomain string, tpm func(dir string) *spirelocal.TPM) *Server {
	t.Helper()
	bin := Dir(t)
	// A short directory of our own: a Unix socket path must fit in 108 bytes,
	// and t.TempDir's can be longer under deep test names.
	dir, err := os.MkdirTemp("", "hfspire")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var tpmConf *spirelocal.TPM
	if tpm != nil {
		tpmConf = tpm(dir)
	}
	s, err := spirelocal.Start(bin, dir, trustDomain, 0, tpmConf)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the directory's removal, so it runs before it.
	t.Cleanup(s.Stop)
	return &Server{Server: s}
}

// Start starts the server again after Stop (same data, same keys, same
// socket) and waits until its admin socket answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the server, as an outage would, until Start.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.Server.Stop()
}

// Agent is a spire-agent process.
type Agent struct {
	*spirelocal.Agent
}

// log is the agent's output with the token's value replaced, so a failing
// test never prints a secret.
func (a *Agent) log() string { return a.Output() }

// StartAgent starts an agent that attests to s with token
// (spirelocal.Server.StartAgent); the test's cleanup stops it.
func (s *Server) StartAgent(t testing.TB, token string, bundle []byte) *Agent {
	t.Helper()
	dir, err := os.MkdirTemp(s.Dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Server.StartAgent(dir, token, bundle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return &Agent{Agent: a}
}

// WaitHealthy waits until the agent has attested and serves its Workload
// API, or fails the test with the agent's log.
func (a *Agent) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := spirelocal.Command(filepath.Dir(a.Cmd.Path), "spire-agent", "healthcheck", "-socketPath", a.SocketPath).CombinedOutput()
		if err == nil {
			return
		}
		if a.Exited() || time.Now().After(deadline) {
			t.Fatalf("spire-agent did not become healthy: %v: %s\nagent log:\n%s", err, out, a.log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitSVID waits until the agent's Workload API hands this test process an
// X.509 SVID for spiffeID (an entry whose selectors match the process, e.g.
// unix:uid:<os.Getuid()>), or fails the test with what the API answered.
// The agent picks up a new entry on its next sync, within seconds.
func (a *Agent) WaitSVID(t testing.TB, spiffeID string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := spirelocal.Command(filepath.Dir(a.Cmd.Path), "spire-agent", "api", "fetch", "x509", "-socketPath", a.SocketPath, "-timeout", "5s").CombinedOutput()
		if err == nil && strings.Contains(string(out), "SPIFFE ID:\t\t"+spiffeID+"\n") {
			return
		}
		if a.Exited() || time.Now().After(deadline) {
			t.Fatalf("the agent handed out no SVID for %s: %v: %s\nagent log:\n%s", spiffeID, err, out, a.log())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// WaitLog waits until the agent's log holds want, and returns the log; found
// is false if the agent exited or timeout passed first. A refused
// attestation shows at once as the server's answer in the log, while the
// agent itself retries for about 40 seconds before it gives up.
func (a *Agent) WaitLog(want string, timeout time.Duration) (log string, found bool) {
	deadline := time.Now().Add(timeout)
	for {
		log = a.log()
		if strings.Contains(log, want) {
			return log, true
		}
		if a.Exited() || time.Now().After(deadline) {
			return log, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// FreePort asks the kernel for a free port on 127.0.0.1 (for a listener the
// test starts beside the server, such as the credential endpoint).
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := spirelocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
