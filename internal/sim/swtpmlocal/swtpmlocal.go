// Package swtpmlocal runs software TPMs (Debian's swtpm, installed by
// hack/swtpm.sh) as child processes, for the tests and the sandbox: the
// virtual TPM a hypervisor host gives a machine, manufactured the way
// Proxmox VE and libvirt manufacture theirs (swtpm_setup with an EK
// certificate from the host's swtpm_localca), and served on a Unix socket
// that go-tpm and spire-agent open as they open /dev/tpmrm0.
package swtpmlocal

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Binaries are the programs this package runs; hack/swtpm.sh installs them.
var Binaries = []string{"swtpm", "swtpm_setup", "swtpm_localca"}

// Check says whether swtpm is installed.
func Check() error {
	for _, b := range Binaries {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("%s is not installed (run hack/swtpm.sh or `make swtpm`): %w", b, err)
		}
	}
	return nil
}

// Manufacturer is a host's swtpm_localca: the CA that signs the
// endorsement-key certificates of the TPMs it manufactures. Its certificates
// are the SPIRE server's endorsement_ca_path.
type Manufacturer struct {
	Dir string
	mu  sync.Mutex
}

// NewManufacturer configures a local CA in dir (created on first use by
// swtpm_localca itself).
func NewManufacturer(dir string) (*Manufacturer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	m := &Manufacturer{Dir: dir}
	files := map[string]string{
		"swtpm-localca.conf": fmt.Sprintf("statedir = %s\nsigningkey = %s\nissuercert = %s\ncertserial = %s\n",
			dir, filepath.Join(dir, "signkey.pem"), filepath.Join(dir, "issuercert.pem"), filepath.Join(dir, "certserial")),
		"swtpm-localca.options": "--platform-manufacturer HyperFleet\n--platform-version 2.1\n--platform-model swtpm\n",
		"swtpm_setup.conf": fmt.Sprintf("create_certs_tool = swtpm_localca\ncreate_certs_tool_config = %s\ncreate_certs_tool_options = %s\nactive_pcr_banks = sha256\n",
			filepath.Join(dir, "swtpm-localca.conf"), filepath.Join(dir, "swtpm-localca.options")),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// EndorsementCA is the manufacturer's root and issuing certificates (PEM),
// once it has manufactured a TPM.
func (m *Manufacturer) EndorsementCA() ([]byte, error) {
	var out []byte
	for _, name := range []string{"swtpm-localca-rootca-cert.pem", "issuercert.pem"} {
		b, err := os.ReadFile(filepath.Join(m.Dir, name)) //nolint:gosec // the local CA's own directory
		if err != nil {
			return nil, fmt.Errorf("swtpm: the local CA has no %s yet (manufacture a TPM first): %w", name, err)
		}
		out = append(out, b...)
	}
	return out, nil
}

// Manufacture creates a TPM 2.0 state in stateDir with an RSA and an ECC
// endorsement key and their certificates in NV (as the TCG's provisioning
// guidance puts them), signed by m.
func (m *Manufacturer) Manufacture(stateDir string) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	// swtpm_localca keeps a serial counter in its directory; one at a time.
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command("swtpm_setup", "--tpm2", "--tpmstate", stateDir, //nolint:gosec // our own arguments
		"--config", filepath.Join(m.Dir, "swtpm_setup.conf"),
		"--create-ek-cert", "--create-platform-cert", "--overwrite")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("swtpm_setup: %w: %s", err, out)
	}
	return nil
}

// TPM is a running swtpm serving one TPM state on a Unix socket.
type TPM struct {
	// Path is the TPM's command socket (what devid.Open and spire-agent's
	// tpm_device_path take).
	Path string
	cmd  *exec.Cmd
	done chan struct{}
	out  bytes.Buffer
}

// Start serves the TPM state in stateDir (Manufacture it first) on
// stateDir/tpm.sock, and its control channel on tpm.sock.ctrl (where
// tpm2-tools' swtpm TCTI looks for it). The TPM starts itself (startup-clear).
func Start(stateDir string) (*TPM, error) {
	t := &TPM{Path: filepath.Join(stateDir, "tpm.sock"), done: make(chan struct{})}
	_ = os.Remove(t.Path)
	t.cmd = exec.Command("swtpm", "socket", "--tpm2", //nolint:gosec // our own arguments
		"--tpmstate", "dir="+stateDir,
		"--server", "type=unixio,path="+t.Path,
		"--ctrl", "type=unixio,path="+t.Path+".ctrl",
		"--flags", "not-need-init,startup-clear")
	t.cmd.Stdout, t.cmd.Stderr = &t.out, &t.out
	if err := t.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start swtpm: %w", err)
	}
	go func() { _ = t.cmd.Wait(); close(t.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", t.Path); err == nil {
			_ = c.Close()
			return t, nil
		}
		select {
		case <-t.done:
			return nil, fmt.Errorf("swtpm exited: %s", t.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Stop()
			return nil, errors.New("swtpm did not open its socket within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends swtpm (SIGTERM; it saves its state); stopping twice does nothing.
func (t *TPM) Stop() {
	select {
	case <-t.done:
		return
	default:
	}
	_ = t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.done:
	case <-time.After(5 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.done
	}
}
