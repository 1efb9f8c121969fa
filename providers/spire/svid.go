package spire

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
	"time"

	svidv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/svid/v1"

	"github.com/hyperfleet/hyperfleet/providers"
)

// csrID is the one SPIFFE ID a CSR asks for, checked to be under prefix
// before the CSR goes to a server that would sign any ID an admin asks for.
func csrID(csr []byte, prefix string) (string, error) {
	req, err := x509.ParseCertificateRequest(csr)
	if err != nil {
		return "", fmt.Errorf("spire: the CSR does not parse: %w", err)
	}
	if len(req.URIs) != 1 {
		return "", fmt.Errorf("spire: the CSR has %d URI SANs, want one SPIFFE ID", len(req.URIs))
	}
	id := req.URIs[0].String()
	if !strings.HasPrefix(id, prefix) {
		return "", fmt.Errorf("%w: SVID %s is not under %s", providers.ErrNotOwned, id, prefix)
	}
	return id, nil
}

// NewCSR makes a P-256 key and a CSR asking for id, for MintX509SVID.
func NewCSR(id string) (csr []byte, key *ecdsa.PrivateKey, err error) {
	u, err := url.Parse(id)
	if err != nil {
		return nil, nil, fmt.Errorf("spire: SPIFFE ID %q: %w", id, err)
	}
	if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, nil, err
	}
	csr, err = x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	return csr, key, err
}

// CSRID is csrID for the fake, which keeps the same rule.
func CSRID(csr []byte, trustDomain, installation string) (string, error) {
	return csrID(csr, InstallationPrefix(trustDomain, installation))
}

func (c *Client) MintX509SVID(ctx context.Context, csr []byte, ttl time.Duration) (X509SVID, error) {
	id, err := csrID(csr, c.prefix())
	if err != nil {
		return X509SVID{}, err
	}
	secs, err := seconds(ttl)
	if err != nil {
		return X509SVID{}, fmt.Errorf("spire: SVID TTL: %w", err)
	}
	resp, err := c.svids.MintX509SVID(ctx, &svidv1.MintX509SVIDRequest{Csr: csr, Ttl: secs})
	if err != nil {
		return X509SVID{}, apiError("mint an X.509 SVID for "+id, err)
	}
	s := resp.GetSvid()
	if len(s.GetCertChain()) == 0 {
		return X509SVID{}, fmt.Errorf("spire: mint an X.509 SVID for %s: an answer without a certificate", id)
	}
	return X509SVID{CertChain: s.GetCertChain(), ID: spiffeID(s.GetId()), ExpiresAt: time.Unix(s.GetExpiresAt(), 0)}, nil
}
