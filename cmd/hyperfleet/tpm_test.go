//go:build !hourglass

package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/sim/swtpmlocal"
	"github.com/hyperfleet/hyperfleet/providers/spire/devid"
)

// `hyperfleet tpm-provision` puts a DevID for the given CN, signed by the
// given CA, into a real (software) TPM, where the machine reads it back;
// missing flags and a key that is not the CA's are refused by name.
func TestTPMProvision(t *testing.T) {
	dir, err := os.MkdirTemp("", "hftpm") // short: the TPM's socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	host, err := swtpmlocal.NewHost(filepath.Join(dir, "host"), "host CA")
	if err != nil {
		t.Fatal(err)
	}
	tpm, err := host.Machine(filepath.Join(dir, "vm"), "") // unprovisioned: the command does it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tpm.Stop)
	ca := host.Authority
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	for path, data := range map[string][]byte{certFile: ca.CertPEM(), keyFile: keyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	var out, errOut bytes.Buffer
	uid := "8d3c0f6e-4f1b-4a47-9d0c-1b2c3d4e5f60"
	if code := dispatch([]string{"tpm-provision", "--tpm", tpm.Path, "--devid-ca-cert", certFile, "--devid-ca-key", keyFile, "--common-name", uid}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	c, err := devid.ReadPath(tpm.Path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(c.CertPEM)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != uid || cert.CheckSignatureFrom(ca.Cert) != nil {
		t.Fatalf("the DevID names %q and is signed by %s; want %s, by the CA", cert.Subject.CommonName, cert.Issuer, uid)
	}
	fp, _ := c.Fingerprint()
	if !strings.Contains(out.String(), "/spire/agent/tpm_devid/"+fp) {
		t.Errorf("the output does not name the agent's ID: %s", out.String())
	}

	errOut.Reset()
	if code := dispatch([]string{"tpm-provision", "--tpm", tpm.Path}, &out, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "--common-name is required") || !strings.Contains(errOut.String(), "--devid-ca-key is required") {
		t.Errorf("missing flags: exit %d, %s", code, errOut.String())
	}
	other, err := devid.NewAuthority("other")
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := other.KeyPEM()
	if err := os.WriteFile(keyFile, otherKey, 0o600); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := dispatch([]string{"tpm-provision", "--tpm", tpm.Path, "--devid-ca-cert", certFile, "--devid-ca-key", keyFile, "--common-name", uid}, &out, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "does not match its certificate") {
		t.Errorf("a key that is not the CA's: exit %d, %s", code, errOut.String())
	}
}
