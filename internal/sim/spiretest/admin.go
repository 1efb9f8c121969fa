package spiretest

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// AdminCredentials mints, through the admin socket, an X509-SVID for id
// (under AdminInstallation's prefix), as `spire-server x509 mint` would for
// an operator's Secret: with AdminID(trust domain) it may call the admin API
// over TCP; with any other ID the server refuses it.
func (s *Server) AdminCredentials(t testing.TB, id string) spire.AdminCredentials {
	t.Helper()
	c, err := spire.DialSocket(s.SocketPath, s.TrustDomain, AdminInstallation)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	csr, key, err := spire.NewCSR(id)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svid, err := c.MintX509SVID(ctx, csr, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := c.TrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	var certs []byte
	for _, c := range svid.CertChain {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	return spire.AdminCredentials{CertPEM: certs, KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), BundlePEM: bundle}
}
