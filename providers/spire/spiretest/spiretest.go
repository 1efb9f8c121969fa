// Package spiretest runs a real SPIRE server (and agents) for tests, from the
// binaries hack/spire.sh builds (`make spire`). HYPERFLEET_SPIRE_DIR names
// their directory; `make test` sets it.
package spiretest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DirEnv names the directory holding spire-server and spire-agent.
const DirEnv = "HYPERFLEET_SPIRE_DIR"

// Dir returns the directory holding the SPIRE binaries, or fails the test
// (never skips it: a suite that silently skipped SPIRE would pass untested).
func Dir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(DirEnv)
	if dir == "" {
		t.Fatalf("%s is not set: build SPIRE with `make spire` and run `HYPERFLEET_SPIRE_DIR=$(hack/spire.sh --print-dir) go test ...`, or run `make test`", DirEnv)
	}
	for _, name := range []string{"spire-server", "spire-agent"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil { //nolint:gosec // the directory make test names, in a test
			t.Fatalf("%s=%s has no %s (run `make spire`): %v", DirEnv, dir, name, err)
		}
	}
	return dir
}

// AdminInstallation and AdminID: the server lets the SVID of AdminID call
// its admin API over TCP; a client of AdminInstallation may mint it.
const AdminInstallation = "admins"

// AdminID is the admin workload's SPIFFE ID in trustDomain.
func AdminID(trustDomain string) string {
	return "spiffe://" + trustDomain + "/hyperfleet/" + AdminInstallation + "/operator"
}

// Server is a running spire-server with the sqlite datastore, the join_token
// node attestor and the memory key manager.
type Server struct {
	// SocketPath is the admin API's Unix socket.
	SocketPath string
	// Port the agent API listens on, on 127.0.0.1.
	Port        int
	TrustDomain string

	bin  string
	dir  string
	conf string
	p    *process
}

// StartServer starts a server in a temporary directory and waits until its
// admin socket answers; the test's cleanup stops it.
func StartServer(t testing.TB, trustDomain string) *Server {
	t.Helper()
	bin := Dir(t)
	// A short directory of our own: a Unix socket path must fit in 108 bytes,
	// and t.TempDir's can be longer under deep test names.
	dir, err := os.MkdirTemp("", "hfspire")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &Server{SocketPath: filepath.Join(dir, "api.sock"), Port: freePort(t), TrustDomain: trustDomain, bin: bin, dir: dir}
	conf := fmt.Sprintf(`server {
  bind_address = "127.0.0.1"
  bind_port = %d
  socket_path = %q
  trust_domain = %q
  data_dir = %q
  log_level = "WARN"
  # Agents of one test attest from one address in quick succession; the
  # per-address attestation limit would refuse them for that alone.
  ratelimit {
    attestation = false
  }
  # AdminID(trust domain) may call the admin API over TCP (DialTLS).
  admin_ids = [%q]
}

plugins {
  DataStore "sql" {
    plugin_data {
      database_type = "sqlite3"
      connection_string = %q
    }
  }
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
}
`, s.Port, s.SocketPath, trustDomain, filepath.Join(dir, "data"), AdminID(trustDomain), filepath.Join(dir, "datastore.sqlite3"))
	s.conf = filepath.Join(dir, "server.conf")
	if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Start(t)
	return s
}

// Start starts the server (again, after Stop: same data, same keys, same
// socket) and waits until its admin socket answers.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.p = start(t, "spire-server", command(s.bin, "spire-server", "run", "-config", s.conf), "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := command(s.bin, "spire-server", "healthcheck", "-socketPath", s.SocketPath).CombinedOutput()
		if err == nil {
			return
		}
		if s.p.exited() || time.Now().After(deadline) {
			t.Fatalf("spire-server did not become healthy: %v: %s\nserver log:\n%s", err, out, s.p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the server, as an outage would, until Start.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.p.stop()
}

// Agent is a spire-agent process.
type Agent struct {
	SocketPath string
	p          *process
}

// log is the agent's output with the token's value replaced, so a failing
// test never prints a secret.
func (a *Agent) log() string { return a.p.output() }

// StartAgent starts an agent that attests to s with token. The token goes
// into a 0600 file, never onto the command line (where ps shows it). With a
// bundle (PEM, spire.Server.TrustBundle) the agent verifies the server with
// it, as a real machine's does; without, it bootstraps insecurely.
func (s *Server) StartAgent(t testing.TB, token string, bundle []byte) *Agent {
	t.Helper()
	dir, err := os.MkdirTemp(s.dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	tokenPath := filepath.Join(dir, "join_token")
	if err := os.WriteFile(tokenPath, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &Agent{SocketPath: filepath.Join(dir, "agent.sock")}
	// The test trusts the server it started itself; real machines get the bundle.
	trust := "insecure_bootstrap = true"
	if bundle != nil {
		bundlePath := filepath.Join(dir, "bundle.pem")
		if err := os.WriteFile(bundlePath, bundle, 0o600); err != nil {
			t.Fatal(err)
		}
		trust = fmt.Sprintf("trust_bundle_path = %q", bundlePath)
	}
	conf := fmt.Sprintf(`agent {
  server_address = "127.0.0.1"
  server_port = %d
  socket_path = %q
  trust_domain = %q
  data_dir = %q
  log_level = "WARN"
  join_token_file = %q
  %s
}

plugins {
  NodeAttestor "join_token" {
    plugin_data {}
  }
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`, s.Port, a.SocketPath, s.TrustDomain, filepath.Join(dir, "data"), tokenPath, trust)
	confPath := filepath.Join(dir, "agent.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	a.p = start(t, "spire-agent", command(s.bin, "spire-agent", "run", "-config", confPath), token)
	return a
}

// WaitHealthy waits until the agent has attested and serves its Workload
// API, or fails the test with the agent's log.
func (a *Agent) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := command(filepath.Dir(a.p.cmd.Path), "spire-agent", "healthcheck", "-socketPath", a.SocketPath).CombinedOutput()
		if err == nil {
			return
		}
		if a.p.exited() || time.Now().After(deadline) {
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
		out, err := command(filepath.Dir(a.p.cmd.Path), "spire-agent", "api", "fetch", "x509", "-socketPath", a.SocketPath, "-timeout", "5s").CombinedOutput()
		if err == nil && strings.Contains(string(out), "SPIFFE ID:\t\t"+spiffeID+"\n") {
			return
		}
		if a.p.exited() || time.Now().After(deadline) {
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
		if a.p.exited() || time.Now().After(deadline) {
			return log, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// process is a child that the test's cleanup stops with SIGTERM (the
// servers shut down cleanly on it), and SIGKILLs only if it hangs.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
	// redact is a secret (a join token) output() never shows.
	redact string
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.redact == "" {
		return p.out.String()
	}
	return strings.ReplaceAll(p.out.String(), p.redact, "<join token>")
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// start runs cmd; redact, if set, is kept out of its output.
func start(t testing.TB, name string, cmd *exec.Cmd, redact string) *process {
	t.Helper()
	p := &process{cmd: cmd, done: make(chan struct{}), redact: redact}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	return p
}

// stop ends the process with SIGTERM, or SIGKILL if it hangs; stopping an
// ended process does nothing.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// command runs one of the SPIRE binaries in dir.
func command(dir, name string, args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(dir, name), args...) //nolint:gosec // the binaries hack/spire.sh built, with arguments of our own
}

// FreePort asks the kernel for a free port on 127.0.0.1 (for a listener the
// test starts beside the server, such as the credential endpoint).
func FreePort(t testing.TB) int { return freePort(t) }

// freePort asks the kernel for a free port on 127.0.0.1.
func freePort(t testing.TB) int {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	n, _ := strconv.Atoi(port)
	return n
}
