package runnersim

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// Minter stands in for a machine's SPIRE agent where a benchmark runs
// many machines: it returns the X509-SVID the machine's agent would be
// issued for id (minted by the SPIRE server's admin API, or a fake's), and
// the trust bundle to verify the credential endpoint with. The join token
// in the machine's user data is not used: the operator's side of the path
// (the credential endpoint, its records, a standby machine's wait) is
// what it exercises, and it costs no spire-agent per machine.
type Minter func(ctx context.Context, id string) (*x509svid.SVID, *x509bundle.Bundle, error)

// fetchMinted asks the credential endpoint for the machine's credentials
// with a minted SVID, as hyperfleet-bootstrap does: 503 and a standby
// machine's 202 are asked again until ctx ends.
func fetchMinted(ctx context.Context, mint Minter, mc spire.MachineConfig) (spire.Credentials, error) {
	svid, bundle, err := mint(ctx, mc.SPIFFEID)
	if err != nil {
		return nil, fmt.Errorf("minting the machine's SVID: %w", err)
	}
	endpoint, err := spiffeid.FromString(mc.EndpointID)
	if err != nil {
		return nil, err
	}
	cfg := tlsconfig.MTLSClientConfig(svid, bundle, tlsconfig.AuthorizeID(endpoint))
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for {
		creds, retry, err := postMinted(ctx, client, mc.CredentialEndpoint)
		if err == nil || !retry {
			return creds, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func postMinted(ctx context.Context, client *http.Client, url string) (spire.Credentials, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, http.NoBody)
	if err != nil {
		return nil, false, err
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, ctx.Err() == nil, err
	}
	defer func() { _ = res.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	switch res.StatusCode {
	case http.StatusOK:
		var creds spire.Credentials
		if err := json.Unmarshal(body, &creds); err != nil {
			return nil, false, errors.New("the credentials are not a JSON object of strings")
		}
		return creds, false, nil
	case http.StatusNoContent:
		return nil, false, nil
	case http.StatusAccepted, http.StatusServiceUnavailable:
		return nil, true, fmt.Errorf("%d", res.StatusCode)
	}
	return nil, false, fmt.Errorf("the credential endpoint answered %d: %s", res.StatusCode, body)
}

// MinterFrom is a Minter on a SPIRE server (or its fake) and its bundle.
func MinterFrom(server spire.Server) Minter {
	return func(ctx context.Context, id string) (*x509svid.SVID, *x509bundle.Bundle, error) {
		csr, key, err := spire.NewCSR(id)
		if err != nil {
			return nil, nil, err
		}
		minted, err := server.MintX509SVID(ctx, csr, time.Hour)
		if err != nil {
			return nil, nil, err
		}
		certs := make([]*x509.Certificate, 0, len(minted.CertChain))
		for _, der := range minted.CertChain {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, nil, err
			}
			certs = append(certs, c)
		}
		sid, err := spiffeid.FromString(minted.ID)
		if err != nil {
			return nil, nil, err
		}
		pemBundle, err := server.TrustBundle(ctx)
		if err != nil {
			return nil, nil, err
		}
		bundle, err := x509bundle.Parse(sid.TrustDomain(), pemBundle)
		if err != nil {
			return nil, nil, err
		}
		return &x509svid.SVID{ID: sid, Certificates: certs, PrivateKey: key}, bundle, nil
	}
}
