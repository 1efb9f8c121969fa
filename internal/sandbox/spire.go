package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/controlplane"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/sim/spirelocal"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
)

// SandboxTrustDomain is the trust domain of the sandbox's SPIRE server, as
// samples/22-kubevirt-runner-template.yaml names it.
const SandboxTrustDomain = "sandbox.hyperfleet.local"

// spireScript builds the SPIRE binaries under bin/spire/<version>/.
const spireScript = "hack/spire.sh"

// spireVersion is the script's default SPIRE_VERSION.
var spireVersion = regexp.MustCompile(`SPIRE_VERSION:-([^}]+)\}`)

// spireBinaryDir is HYPERFLEET_SPIRE_DIR, else the directory `make spire`
// builds into. It never builds SPIRE itself: a cold build takes minutes,
// which `make dev` (depending on `make spire`) shows with its progress.
func spireBinaryDir() (string, error) {
	if dir := os.Getenv(spirelocal.DirEnv); dir != "" {
		if err := spirelocal.CheckDir(dir); err != nil {
			return "", fmt.Errorf("%s=%w", spirelocal.DirEnv, err)
		}
		return dir, nil
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	script, err := os.ReadFile(filepath.Join(root, spireScript)) //nolint:gosec // the repository's own script, found by RepoRoot
	if err != nil {
		return "", err
	}
	m := spireVersion.FindSubmatch(script)
	if m == nil {
		return "", fmt.Errorf("%s names no default SPIRE_VERSION", spireScript)
	}
	dir := filepath.Join(root, "bin", "spire", string(m[1]))
	if err := spirelocal.CheckDir(dir); err != nil {
		return "", fmt.Errorf("the runner pool's machines attest through SPIRE, and %w; or set %s", err, spirelocal.DirEnv)
	}
	return dir, nil
}

// attestationRig is what the demo pool's attesting runners need: a SPIRE
// server, the real bootstrap agent and the fake runner, and a directory for
// the VMs' filesystems and their spire-agents (short: a Unix socket path
// must fit in 108 bytes).
type attestationRig struct {
	base   string
	server *spirelocal.Server
	// tpm is the host of the machines that attest with their TPM.
	tpm *tpmHost
	// bin is the SPIRE binaries' directory; agent and fakeRunner the
	// bootstrap agent's and the fake runner's binaries.
	bin, agent, fakeRunner string
	// endpointAddr is the credential endpoint's listen address.
	endpointAddr string

	mu    sync.Mutex
	count int
}

// startAttestation starts a SPIRE server on addr (127.0.0.1:port) in a new
// temporary directory and builds the agent; stop ends the server and
// removes the directory.
func startAttestation(ctx context.Context, addr string, say func(string, ...any)) (*attestationRig, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		return nil, fmt.Errorf("--spire-address %q: want 127.0.0.1:port (the server listens on loopback)", addr)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("--spire-address %q: %w", addr, err)
	}
	bin, err := spireBinaryDir()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "hfdev")
	if err != nil {
		return nil, err
	}
	r := &attestationRig{base: base, bin: bin}
	ok := false
	defer func() {
		if !ok {
			r.stop()
		}
	}()
	if os.Getuid() == 0 {
		// As root, the runner runs as nobody, who must reach its VM's root.
		if err := os.Chmod(base, 0o755); err != nil { //nolint:gosec // holds the VMs' filesystems, no secret
			return nil, err
		}
	}
	spireDir := filepath.Join(base, "spire")
	if err := os.Mkdir(spireDir, 0o700); err != nil {
		return nil, err
	}
	started := time.Now()
	var tpmConf *spirelocal.TPM
	if r.tpm, tpmConf, err = newTPMHost(filepath.Join(base, "t")); err != nil {
		return nil, err
	}
	if r.server, err = spirelocal.Start(bin, spireDir, SandboxTrustDomain, port, tpmConf); err != nil {
		return nil, err
	}
	say("==> SPIRE server at %s (trust domain %s; join_token, and tpm_devid for swtpm vTPMs; admin socket %s) up in %s", r.server.Address(), SandboxTrustDomain, r.server.SocketPath, time.Since(started).Round(100*time.Millisecond))
	started = time.Now()
	if r.agent, r.fakeRunner, err = runnersim.BuildAgent(ctx, filepath.Join(base, "bin")); err != nil {
		return nil, err
	}
	say("==> Built hyperfleet-bootstrap and the fake actions runner for the simulated runner VMs in %s", time.Since(started).Round(100*time.Millisecond))
	endpointPort, err := spirelocal.FreePort()
	if err != nil {
		return nil, err
	}
	r.endpointAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(endpointPort))
	ok = true
	return r, nil
}

// stop ends the SPIRE server and removes the directory; the agents'
// processes must have ended first (Agents.Wait).
func (r *attestationRig) stop() {
	if r.server != nil {
		r.server.Stop()
	}
	_ = os.RemoveAll(r.base)
}

// process runs the real bootstrap agent for an attesting runner claim, in a
// VM root of its own with the fake runner installed: it attests through a
// spire-agent and fetches its JIT config from the credential endpoint.
func (r *attestationRig) process(claim *hypervisorv1alpha1.MachineClaim) (*runnersim.Process, error) {
	r.mu.Lock()
	r.count++
	n := r.count
	r.mu.Unlock()
	root, install, err := runnersim.VMRoot(filepath.Join(r.base, "vm"), claim.Name, r.fakeRunner)
	if err != nil {
		return nil, err
	}
	// The agent's socket is <dir>/agent.sock: /tmp/hfdevNNN/a7/agent.sock.
	agentDir := filepath.Join(r.base, "a"+strconv.Itoa(n))
	user := fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	if os.Getuid() == 0 {
		user = "65534:65534"
	}
	return &runnersim.Process{
		Agent: r.agent, Root: root, Console: console(filepath.Join(root, "console.log")),
		Runner:     runnerconfig.Runner{InstallDir: install, User: user},
		Env:        append(os.Environ(), "FAKERUNNER_VM_ROOT="+root),
		SPIREAgent: filepath.Join(r.bin, "spire-agent"), AgentDir: agentDir,
	}, nil
}

// console is a VM's console log, the agent's and the runner's output: kept
// out of the sandbox's own output, in a file only its owner reads. It opens
// the file for every write, so no descriptor outlives the agent.
type console string

func (c console) Write(b []byte) (int, error) {
	f, err := os.OpenFile(string(c), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}
