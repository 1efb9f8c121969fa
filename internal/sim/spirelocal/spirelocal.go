// Package spirelocal runs a real spire-server (and spire-agents) as child
// processes on this machine, from the binaries hack/spire.sh builds (`make
// spire`): the sqlite datastore, the join_token node attestor, the memory key
// manager, the agent API on 127.0.0.1. The sandbox (`hyperfleet-dev`) runs
// one for its attesting runners; spiretest wraps it for tests.
package spirelocal

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
	"time"
)

// DirEnv names the directory holding spire-server and spire-agent.
const DirEnv = "HYPERFLEET_SPIRE_DIR"

// CheckDir says whether dir holds both SPIRE binaries.
func CheckDir(dir string) error {
	for _, name := range []string{"spire-server", "spire-agent"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("%s has no %s (run `make spire`): %w", dir, name, err)
		}
	}
	return nil
}

// AdminInstallation and AdminID: the server lets the SVID of AdminID call
// its admin API over TCP; a client of AdminInstallation may mint it.
const AdminInstallation = "admins"

// AdminID is the admin workload's SPIFFE ID in trustDomain.
func AdminID(trustDomain string) string {
	return "spiffe://" + trustDomain + "/hyperfleet/" + AdminInstallation + "/operator"
}

// Server is a running spire-server.
type Server struct {
	// SocketPath is the admin API's Unix socket.
	SocketPath string
	// Port the agent API listens on, on 127.0.0.1.
	Port        int
	TrustDomain string
	// Dir holds the configuration, the data and the socket; BinDir the
	// SPIRE binaries.
	Dir, BinDir string

	conf string
	p    *Process
}

// TPM configures the server's tpm_devid node attestor: DevIDCA and
// EndorsementCA are PEM files, the DevID authority's certificate and the
// TPM manufacturers' (swtpmlocal.Manufacturer.EndorsementCA).
type TPM struct {
	DevIDCA, EndorsementCA string
}

// Start writes a server configuration into dir (short: the admin socket's
// path must fit in 108 bytes), starts spire-server from binDir listening on
// 127.0.0.1:port (0: a free port) and waits until its admin socket answers.
// With tpm, agents may attest with a TPM DevID as well as a join token.
func Start(binDir, dir, trustDomain string, port int, tpm *TPM) (*Server, error) {
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	s := &Server{SocketPath: filepath.Join(dir, "api.sock"), Port: port, TrustDomain: trustDomain, Dir: dir, BinDir: binDir}
	conf := fmt.Sprintf(`server {
%s  # Agents attest from one address in quick succession; the per-address
  # attestation limit would refuse them for that alone.
  ratelimit {
    attestation = false
  }
  # AdminID(trust domain) may call the admin API over TCP (spire.DialTLS).
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
%s  KeyManager "memory" {
    plugin_data {}
  }
}
`, common("bind", s.Port, s.SocketPath, trustDomain, filepath.Join(dir, "data")), AdminID(trustDomain), filepath.Join(dir, "datastore.sqlite3"), tpmAttestor(tpm))
	s.conf = filepath.Join(dir, "server.conf")
	if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return s, s.Restart()
}

func tpmAttestor(tpm *TPM) string {
	if tpm == nil {
		return ""
	}
	return fmt.Sprintf(`  NodeAttestor "tpm_devid" {
    plugin_data {
      devid_ca_path = %q
      endorsement_ca_path = %q
    }
  }
`, tpm.DevIDCA, tpm.EndorsementCA)
}

// common is the start of a server's (role "bind": where it listens) or an
// agent's (role "server": where it attests) section of its configuration.
func common(role string, port int, socket, trustDomain, dataDir string) string {
	return fmt.Sprintf(`  %s_address = "127.0.0.1"
  %s_port = %d
  socket_path = %q
  trust_domain = %q
  data_dir = %q
  log_level = "WARN"
`, role, role, port, socket, trustDomain, dataDir)
}

// Agent is a spire-agent process.
type Agent struct {
	// SocketPath is its Workload API's socket.
	SocketPath string
	*Process
}

// StartAgent starts an agent in dir (short, like the server's) that
// attests to s with token. The token goes into a 0600 file, never onto the
// command line (where ps shows it), and never into the agent's Output.
// With a bundle (PEM, spire.Server.TrustBundle) the agent verifies the
// server with it, as a real machine's does; without, it bootstraps
// insecurely.
func (s *Server) StartAgent(dir, token string, bundle []byte) (*Agent, error) {
	tokenPath := filepath.Join(dir, "join_token")
	if err := os.WriteFile(tokenPath, []byte(token), 0o600); err != nil {
		return nil, err
	}
	a := &Agent{SocketPath: filepath.Join(dir, "agent.sock")}
	trust := "insecure_bootstrap = true"
	if bundle != nil {
		bundlePath := filepath.Join(dir, "bundle.pem")
		if err := os.WriteFile(bundlePath, bundle, 0o600); err != nil {
			return nil, err
		}
		trust = fmt.Sprintf("trust_bundle_path = %q", bundlePath)
	}
	conf := fmt.Sprintf(`agent {
%s  join_token_file = %q
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
`, common("server", s.Port, a.SocketPath, s.TrustDomain, filepath.Join(dir, "data")), tokenPath, trust)
	confPath := filepath.Join(dir, "agent.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	p, err := StartProcess(Command(s.BinDir, "spire-agent", "run", "-config", confPath), token)
	if err != nil {
		return nil, fmt.Errorf("start spire-agent: %w", err)
	}
	a.Process = p
	return a, nil
}

// StartTPMAgent starts an agent in dir that attests to s with the DevID in
// the TPM at tpmPath (a device or swtpm's socket): cert, pub and priv are
// the DevID's certificate (PEM) and TPM blobs (devid.Credential).
func (s *Server) StartTPMAgent(dir, tpmPath string, cert, pub, priv, bundle []byte) (*Agent, error) {
	a := &Agent{SocketPath: filepath.Join(dir, "agent.sock")}
	paths := map[string][]byte{"devid.crt": cert, "devid.pub": pub, "devid.priv": priv, "bundle.pem": bundle}
	for name, data := range paths {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	conf := fmt.Sprintf(`agent {
%s  trust_bundle_path = %q
}

plugins {
  NodeAttestor "tpm_devid" {
    plugin_data {
      devid_cert_path = %q
      devid_pub_path = %q
      devid_priv_path = %q
      tpm_device_path = %q
    }
  }
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`, common("server", s.Port, a.SocketPath, s.TrustDomain, filepath.Join(dir, "data")), filepath.Join(dir, "bundle.pem"),
		filepath.Join(dir, "devid.crt"), filepath.Join(dir, "devid.pub"), filepath.Join(dir, "devid.priv"), tpmPath)
	confPath := filepath.Join(dir, "agent.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	p, err := StartProcess(Command(s.BinDir, "spire-agent", "run", "-config", confPath), "")
	if err != nil {
		return nil, fmt.Errorf("start spire-agent: %w", err)
	}
	a.Process = p
	return a, nil
}

// Restart starts the server (again, after Stop: same data, same keys, same
// socket) and waits until its admin socket answers; if it does not within
// 30 s, it stops the process and returns the server's log.
func (s *Server) Restart() error {
	p, err := StartProcess(Command(s.BinDir, "spire-server", "run", "-config", s.conf), "")
	if err != nil {
		return fmt.Errorf("start spire-server: %w", err)
	}
	s.p = p
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := Command(s.BinDir, "spire-server", "healthcheck", "-socketPath", s.SocketPath).CombinedOutput()
		if err == nil {
			return nil
		}
		if p.Exited() || time.Now().After(deadline) {
			p.Stop()
			return fmt.Errorf("spire-server did not become healthy: %w: %s\nserver log:\n%s", err, out, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the server (SIGTERM; it shuts down cleanly on it); stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	if s.p != nil {
		s.p.Stop()
	}
}

// Running says whether the server's process is alive.
func (s *Server) Running() bool { return s.p != nil && !s.p.Exited() }

// Address is the agent API's host:port (for agents, and spire.DialTLS).
func (s *Server) Address() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Process is a SPIRE child process whose output is kept in memory.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
	// redact is a secret (a join token) Output never shows.
	redact string
}

// StartProcess runs cmd, collecting its output; redact, if set, is kept
// out of Output.
func StartProcess(cmd *exec.Cmd, redact string) (*Process, error) {
	p := &Process{Cmd: cmd, done: make(chan struct{}), redact: redact}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output is what the process printed, with the secret it was started with
// replaced.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.redact == "" {
		return p.out.String()
	}
	return strings.ReplaceAll(p.out.String(), p.redact, "<join token>")
}

// Exited says whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process with SIGTERM, or SIGKILL if it hangs for 10 s;
// stopping an ended process does nothing.
func (p *Process) Stop() {
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Command runs one of the SPIRE binaries in dir.
func Command(dir, name string, args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(dir, name), args...) //nolint:gosec // the binaries hack/spire.sh built, with arguments of our own
}

// FreePort asks the kernel for a free port on 127.0.0.1.
func FreePort() (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	_, port, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}
