package spiretest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/sim/spirelocal"
	"github.com/hyperfleet/hyperfleet/internal/sim/swtpmlocal"
	"github.com/hyperfleet/hyperfleet/providers/spire/devid"
)

// TPMLab is a hypervisor host's side of TPM attestation
// (swtpmlocal.Host: its vTPM manufacturer and the DevID authority), in a
// server's directory. The server it starts trusts both.
type TPMLab struct {
	*swtpmlocal.Host
	dir string
}

// StartServerWithTPM starts a server (StartServer) whose tpm_devid node
// attestor trusts a new TPMLab's manufacturer and DevID authority. It fails
// the test when swtpm is not installed (hack/swtpm.sh), never skips it.
func StartServerWithTPM(t testing.TB, trustDomain string) (*Server, *TPMLab) {
	t.Helper()
	var lab *TPMLab
	s := startServer(t, trustDomain, func(dir string) *spirelocal.TPM {
		lab = &TPMLab{dir: filepath.Join(dir, "tpm")}
		var err error
		if lab.Host, err = swtpmlocal.NewHost(lab.dir, "HyperFleet test DevID CA"); err != nil {
			t.Fatal(err)
		}
		return &spirelocal.TPM{DevIDCA: lab.DevIDCA, EndorsementCA: lab.EndorsementCA}
	})
	return s, lab
}

// NewTPM is a machine's vTPM (swtpmlocal.Host.Machine), provisioned with a
// DevID for commonName unless it is empty. The test's cleanup stops it.
func (l *TPMLab) NewTPM(t testing.TB, commonName string) *swtpmlocal.TPM {
	t.Helper()
	dir, err := os.MkdirTemp(l.dir, "vtpm")
	if err != nil {
		t.Fatal(err)
	}
	tpm, err := l.Machine(dir, commonName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tpm.Stop)
	return tpm
}

// StartTPMAgent starts an agent that attests to s with the DevID stored in
// tpm (devid.Read, as hyperfleet-bootstrap reads it); the test's cleanup
// stops it.
func (s *Server) StartTPMAgent(t testing.TB, tpm *swtpmlocal.TPM, bundle []byte) *Agent {
	t.Helper()
	c, err := devid.ReadPath(tpm.Path)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(s.Dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Server.StartTPMAgent(dir, tpm.Path, c.CertPEM, c.Public, c.Private, bundle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	return &Agent{Agent: a}
}
