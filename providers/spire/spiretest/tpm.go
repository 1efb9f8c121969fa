package spiretest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hyperfleet/hyperfleet/providers/spire/devid"
	"github.com/hyperfleet/hyperfleet/providers/spire/devid/swtpmlocal"
	"github.com/hyperfleet/hyperfleet/providers/spire/spirelocal"
)

// TPMLab is what a hypervisor host holds for TPM attestation: the
// manufacturer (swtpm_localca) of its machines' virtual TPMs and the
// platform's DevID authority. The server it starts trusts both.
type TPMLab struct {
	Manufacturer *swtpmlocal.Manufacturer
	Authority    devid.Authority
	dir          string
}

// StartServerWithTPM starts a server (StartServer) whose tpm_devid node
// attestor trusts a new TPMLab's manufacturer and DevID authority. It fails
// the test when swtpm is not installed (hack/swtpm.sh), never skips it.
func StartServerWithTPM(t testing.TB, trustDomain string) (*Server, *TPMLab) {
	t.Helper()
	if err := swtpmlocal.Check(); err != nil {
		t.Fatal(err)
	}
	var lab *TPMLab
	s := startServer(t, trustDomain, func(dir string) *spirelocal.TPM {
		var err error
		lab = &TPMLab{dir: filepath.Join(dir, "tpm")}
		if lab.Manufacturer, err = swtpmlocal.NewManufacturer(filepath.Join(lab.dir, "localca")); err != nil {
			t.Fatal(err)
		}
		// The local CA makes its certificates on its first TPM.
		if err := lab.Manufacturer.Manufacture(filepath.Join(lab.dir, "first")); err != nil {
			t.Fatal(err)
		}
		if lab.Authority, err = devid.NewAuthority("HyperFleet test DevID CA"); err != nil {
			t.Fatal(err)
		}
		ek, err := lab.Manufacturer.EndorsementCA()
		if err != nil {
			t.Fatal(err)
		}
		conf := &spirelocal.TPM{DevIDCA: filepath.Join(lab.dir, "devid-ca.pem"), EndorsementCA: filepath.Join(lab.dir, "endorsement-ca.pem")}
		for path, data := range map[string][]byte{conf.DevIDCA: lab.Authority.CertPEM(), conf.EndorsementCA: ek} {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return conf
	})
	return s, lab
}

// TPM is a machine's running virtual TPM.
type TPM struct {
	*swtpmlocal.TPM
	Dir string
}

// NewTPM manufactures and starts a virtual TPM and, when commonName is not
// empty, provisions it with a DevID for commonName, as the host does before
// the machine first boots. The test's cleanup stops it.
func (l *TPMLab) NewTPM(t testing.TB, commonName string) *TPM {
	t.Helper()
	dir, err := os.MkdirTemp(l.dir, "vtpm")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Manufacturer.Manufacture(dir); err != nil {
		t.Fatal(err)
	}
	sw, err := swtpmlocal.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sw.Stop)
	if commonName != "" {
		l.Provision(t, sw.Path, commonName)
	}
	return &TPM{TPM: sw, Dir: dir}
}

// Provision puts a DevID for commonName into the TPM at path.
func (l *TPMLab) Provision(t testing.TB, path, commonName string) devid.Credential {
	t.Helper()
	rw, err := devid.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := devid.Provision(rw, l.Authority, commonName)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartTPMAgent starts an agent that attests to s with the DevID stored in
// tpm (devid.Read, as hyperfleet-bootstrap reads it); the test's cleanup
// stops it.
func (s *Server) StartTPMAgent(t testing.TB, tpm *TPM, bundle []byte) *Agent {
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
