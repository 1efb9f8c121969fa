package spire

import (
	"fmt"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffegrpc/grpccredentials"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc"
)

// AdminCredentials let the operator call a SPIRE server's admin API over
// TCP: an X509-SVID whose ID the server lists in admin_ids, its key, and
// the trust bundle the server's own SVID is verified with — PEM, as a
// Secret (synced by an ExternalSecret) holds them.
type AdminCredentials struct {
	CertPEM, KeyPEM, BundlePEM []byte
}

// DialTLS connects to the server's TCP endpoint (host:port) with mTLS as
// an admin workload, where the admin socket cannot be mounted (a server on
// another node, a Pod that must not use hostPath). The server must present
// spiffe://<trust domain>/spire/server. The credentials are read once: a
// rotated Secret needs a new client (attestation.Registry dials again when
// the Secret changes).
func DialTLS(addr string, creds AdminCredentials, trustDomain, installation string) (*Client, error) {
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return nil, fmt.Errorf("spire: trust domain %q: %w", trustDomain, err)
	}
	svid, err := x509svid.Parse(creds.CertPEM, creds.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("spire: the admin SVID: %w", err)
	}
	bundle, err := x509bundle.Parse(td, creds.BundlePEM)
	if err != nil {
		return nil, fmt.Errorf("spire: the trust bundle: %w", err)
	}
	server, err := spiffeid.FromPath(td, "/spire/server")
	if err != nil {
		return nil, err
	}
	return dial(addr, grpc.WithTransportCredentials(grpccredentials.MTLSClientCredentials(svid, bundle, tlsconfig.AuthorizeID(server))),
		trustDomain, installation)
}
