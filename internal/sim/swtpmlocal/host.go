package swtpmlocal

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hyperfleet/hyperfleet/providers/spire/devid"
)

// Host is what a hypervisor host holds for TPM attestation: the
// manufacturer (swtpm_localca) of its machines' virtual TPMs and the
// platform's DevID authority, whose certificates a SPIRE server's tpm_devid
// attestor is configured to trust (DevIDCA, EndorsementCA).
type Host struct {
	Manufacturer *Manufacturer
	Authority    devid.Authority
	// DevIDCA and EndorsementCA are PEM files of the authority's and the
	// manufacturer's certificates: devid_ca_path and endorsement_ca_path.
	DevIDCA, EndorsementCA string
}

// NewHost sets up a host in dir: a local CA, which makes its certificates
// with its first TPM, and a new DevID authority named authority.
func NewHost(dir, authority string) (*Host, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	m, err := NewManufacturer(filepath.Join(dir, "localca"))
	if err != nil {
		return nil, err
	}
	if err := m.Manufacture(filepath.Join(dir, "first")); err != nil {
		return nil, err
	}
	a, err := devid.NewAuthority(authority)
	if err != nil {
		return nil, err
	}
	ek, err := m.EndorsementCA()
	if err != nil {
		return nil, err
	}
	h := &Host{Manufacturer: m, Authority: a,
		DevIDCA: filepath.Join(dir, "devid-ca.pem"), EndorsementCA: filepath.Join(dir, "endorsement-ca.pem")}
	for path, data := range map[string][]byte{h.DevIDCA: a.CertPEM(), h.EndorsementCA: ek} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Machine manufactures a machine's vTPM in stateDir, starts it and, when
// commonName is not empty, provisions it with a DevID for commonName (the
// claim's UID), as the host does before the machine first boots. The caller
// stops it.
func (h *Host) Machine(stateDir, commonName string) (*TPM, error) {
	if err := h.Manufacturer.Manufacture(stateDir); err != nil {
		return nil, err
	}
	t, err := Start(stateDir)
	if err != nil {
		return nil, err
	}
	if commonName == "" {
		return t, nil
	}
	rw, err := devid.Open(t.Path)
	if err == nil {
		_, err = devid.Provision(rw, h.Authority, commonName)
	}
	if err != nil {
		t.Stop()
		return nil, fmt.Errorf("provisioning the vTPM in %s: %w", stateDir, err)
	}
	return t, nil
}
