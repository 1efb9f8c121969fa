package attestation

import (
	"context"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// identityTTL is what the endpoint's SVID is asked for; it is renewed at
// half of what the server granted, so a SPIRE outage of up to half of it
// goes unnoticed by machines.
const identityTTL = time.Hour

// Identity is the credential endpoint's own X509-SVID
// (spire.EndpointID), minted through the SPIRE admin API since the operator
// runs no agent, and the trust domain's bundle machines' SVIDs are checked
// against. It is a go-spiffe x509svid.Source and x509bundle.Source.
type Identity struct {
	server spire.Server
	id     spiffeid.ID

	mu     sync.RWMutex
	svid   *x509svid.SVID
	bundle *x509bundle.Bundle
}

// NewIdentity mints the endpoint's first SVID and reads the bundle.
func NewIdentity(ctx context.Context, server spire.Server, trustDomain, installation string) (*Identity, error) {
	id, err := spiffeid.FromString(spire.EndpointID(trustDomain, installation))
	if err != nil {
		return nil, err
	}
	i := &Identity{server: server, id: id}
	if err := i.renew(ctx); err != nil {
		return nil, err
	}
	return i, nil
}

// ID is the endpoint's SPIFFE ID, which machines authorize.
func (i *Identity) ID() spiffeid.ID { return i.id }

func (i *Identity) renew(ctx context.Context) error {
	csr, key, err := spire.NewCSR(i.id.String())
	if err != nil {
		return err
	}
	minted, err := i.server.MintX509SVID(ctx, csr, identityTTL)
	if err != nil {
		return fmt.Errorf("minting the credential endpoint's SVID: %w", err)
	}
	certs := make([]*x509.Certificate, 0, len(minted.CertChain))
	for _, der := range minted.CertChain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("the minted SVID: %w", err)
		}
		certs = append(certs, c)
	}
	if err := i.refreshBundle(ctx); err != nil {
		return fmt.Errorf("reading the trust bundle: %w", err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.svid = &x509svid.SVID{ID: i.id, Certificates: certs, PrivateKey: key}
	return nil
}

// GetX509SVID implements x509svid.Source.
func (i *Identity) GetX509SVID() (*x509svid.SVID, error) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.svid, nil
}

// GetX509BundleForTrustDomain implements x509bundle.Source: only the
// endpoint's own trust domain is trusted.
func (i *Identity) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	if td != i.id.TrustDomain() {
		return nil, fmt.Errorf("no bundle for trust domain %q: the credential endpoint trusts %q only", td, i.id.TrustDomain())
	}
	return i.bundle, nil
}

// bundleRefresh is how often the trust bundle is re-read: SPIRE publishes
// a new authority in it before it signs with it, and a machine's SVID from
// a new authority must verify here soon after (a server restarted with the
// memory key manager has a new authority at once).
const bundleRefresh = 10 * time.Second

// Run renews the SVID at half its life and re-reads the bundle every
// bundleRefresh until ctx ends; a failure is logged and retried at the next
// tick, and what was read last is served meanwhile.
func (i *Identity) Run(ctx context.Context, log logr.Logger) {
	t := time.NewTicker(bundleRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		i.mu.RLock()
		leaf := i.svid.Certificates[0]
		i.mu.RUnlock()
		if time.Now().After(leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)) {
			if err := i.renew(ctx); err != nil {
				log.Error(err, "Renewing the credential endpoint's SVID failed; retrying", "expires", leaf.NotAfter)
			}
			continue
		}
		if err := i.refreshBundle(ctx); err != nil {
			log.Error(err, "Re-reading the trust bundle failed; retrying")
		}
	}
}

func (i *Identity) refreshBundle(ctx context.Context) error {
	pem, err := i.server.TrustBundle(ctx)
	if err != nil {
		return err
	}
	bundle, err := x509bundle.Parse(i.id.TrustDomain(), pem)
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.bundle = bundle
	i.mu.Unlock()
	return nil
}
