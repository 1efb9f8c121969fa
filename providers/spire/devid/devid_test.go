package devid

import (
	"strings"
	"testing"
)

// What is stored in the NV index decodes to what was stored, and anything
// shorter or not a certificate is refused rather than handed to the agent.
func TestEncodeDecode(t *testing.T) {
	ca, err := NewAuthority("test")
	if err != nil {
		t.Fatal(err)
	}
	c := Credential{CertPEM: ca.CertPEM(), Public: []byte{1, 2, 3}, Private: []byte{4, 5}}
	b, err := c.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(b)
	if err != nil || string(got.CertPEM) != string(c.CertPEM) || string(got.Public) != "\x01\x02\x03" || string(got.Private) != "\x04\x05" {
		t.Fatalf("decode = %+v, %v", got, err)
	}
	for i := range len(b) {
		if _, err := decode(b[:i]); err == nil {
			t.Fatalf("decode of the first %d of %d bytes succeeded", i, len(b))
		}
	}
	notPEM, _ := Credential{CertPEM: []byte("x"), Public: []byte{1}, Private: []byte{2}}.encode()
	if _, err := decode(notPEM); err == nil || !strings.Contains(err.Error(), "not PEM") {
		t.Fatalf("a certificate that is not PEM: %v", err)
	}
	if _, err := (Credential{CertPEM: make([]byte, 70000)}).encode(); err == nil {
		t.Fatal("a part longer than 16 bits can say was encoded")
	}
}

// LoadAuthority takes back what KeyPEM and CertPEM give, and refuses a key
// of another authority or a key in place of the certificate.
func TestLoadAuthority(t *testing.T) {
	a, err := NewAuthority("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewAuthority("b")
	if err != nil {
		t.Fatal(err)
	}
	ak, _ := a.KeyPEM()
	bk, _ := b.KeyPEM()
	if got, err := LoadAuthority(a.CertPEM(), ak); err != nil || !got.Cert.Equal(a.Cert) {
		t.Fatalf("LoadAuthority(a) = %v", err)
	}
	if _, err := LoadAuthority(a.CertPEM(), bk); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("a's certificate with b's key: %v", err)
	}
	if _, err := LoadAuthority(ak, ak); err == nil {
		t.Fatal("a key as the certificate was accepted")
	}
}
