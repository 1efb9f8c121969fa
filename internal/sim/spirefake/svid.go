package spirefake

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"time"

	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// ca is the fake's signing authority, made on first use: its certificate
// is what TrustBundle returns when the test set no Bundle of its own.
type ca struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
}

func (s *Server) authority() (*ca, error) {
	if s.ca != nil {
		return s.ca, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	td := &url.URL{Scheme: "spiffe", Host: s.TrustDomain}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"spirefake"}},
		NotBefore: s.now().Add(-time.Minute), NotAfter: s.now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, URIs: []*url.URL{td},
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	s.ca = &ca{key: key, cert: cert}
	return s.ca, nil
}

// caPEM is the authority's certificate, or nil before any was made.
func (s *Server) caPEM() []byte {
	if s.ca == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.ca.cert.Raw})
}

func (c *Client) MintX509SVID(_ context.Context, csr []byte, ttl time.Duration) (spire.X509SVID, error) {
	id, err := spire.CSRID(csr, c.s.TrustDomain, c.installation)
	if err != nil {
		return spire.X509SVID{}, err
	}
	req, _ := x509.ParseCertificateRequest(csr) // parsed by CSRID already
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	authority, err := c.s.authority()
	if err != nil {
		return spire.X509SVID{}, err
	}
	if ttl <= 0 {
		ttl = time.Hour
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, URIs: req.URIs,
		NotBefore: c.s.now().Add(-10 * time.Second), NotAfter: c.s.now().Add(ttl),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageKeyAgreement,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, authority.cert, req.PublicKey, authority.key)
	if err != nil {
		return spire.X509SVID{}, fmt.Errorf("spirefake: signing %s: %w", id, err)
	}
	return spire.X509SVID{CertChain: [][]byte{der}, ID: id, ExpiresAt: tmpl.NotAfter.Truncate(time.Second)}, nil
}

func (c *Client) ForgetMachine(_ context.Context, m spire.MachineID) error {
	if err := c.own(m); err != nil {
		return err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for id, e := range c.s.entries {
		switch {
		case e.ParentID == m.String():
			delete(c.s.entries, id)
		case e.NodeAlias && e.SPIFFEID == m.String():
			delete(c.s.agents, e.ParentID)
			delete(c.s.entries, id)
		}
	}
	return nil
}
