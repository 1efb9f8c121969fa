package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"

	"github.com/hyperfleet/hyperfleet/providers/spire"
)

const (
	// maxCredentials bounds the credential endpoint's answer.
	maxCredentials = 1 << 20
	// maxMessage bounds the endpoint's message quoted in an error.
	maxMessage = 200
	// The retry delays for 503 and connection errors: the endpoint (the
	// operator) may be restarting or failing over, or not know the
	// machine's claim yet.
	firstRetry = time.Second
	maxRetry   = 10 * time.Second
	// standbyRetry is the pause between a standby machine's requests; the
	// endpoint holds each one while no claim takes the machine.
	standbyRetry = 500 * time.Millisecond
)

// errWrongEndpoint: the credential endpoint did not prove it is the SPIFFE
// ID the configuration names. Nothing is sent to it, and trying again
// would not change who it is.
var errWrongEndpoint = errors.New("the credential endpoint is not who the attestation configuration says")

// errStandby: the endpoint answered 202, the machine is on standby.
var errStandby = errors.New("a standby machine: no claim has taken it yet")

// credentials POSTs (empty body) to the credential endpoint over mTLS with
// the machine's SVID, and returns what it answers: the credentials (200),
// none (204), or an error. 503 and connection errors are tried again until
// ctx ends. A standby machine (202: no claim has taken it yet) asks again
// until one does or standby ends: it holds nothing until then, and the
// endpoint holds each request while it waits. It never logs a credential's
// value, only their names.
func (a *attestation) credentials(ctx, standby context.Context, log func(string, ...any)) (spire.Credentials, error) {
	if a.cfg.endpoint == nil {
		log("No credential endpoint: the machine only attests")
		return nil, nil
	}
	endpoint := a.cfg.CredentialEndpoint
	tlsConfig := tlsconfig.MTLSClientConfig(a.source, a.source, tlsconfig.AuthorizeID(a.cfg.endpointID))
	verify := tlsConfig.VerifyPeerCertificate
	tlsConfig.VerifyPeerCertificate = func(raw [][]byte, chains [][]*x509.Certificate) error { //nolint:gosec // G123: the SPIFFE check go-spiffe sets, marked so it is not retried
		if err := verify(raw, chains); err != nil {
			return fmt.Errorf("%w (%s): %w", errWrongEndpoint, a.cfg.endpointID, err)
		}
		return nil
	}
	transport := &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: 10 * time.Second}
	defer transport.CloseIdleConnections()
	client := &http.Client{
		Transport: transport,
		Timeout:   30 * time.Second,
		// The machine's SVID goes to the endpoint the configuration names
		// and nowhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	delay := firstRetry
	for {
		creds, retry, err := post(ctx, client, endpoint)
		if err == nil {
			if creds == nil {
				log("The credential endpoint has no credentials for this machine (204) after %s", time.Since(a.started).Round(time.Millisecond))
			} else {
				log("Credentials received after %s: %s", time.Since(a.started).Round(time.Millisecond), strings.Join(names(creds), ", "))
			}
			return creds, nil
		}
		if errors.Is(err, errStandby) {
			if ctx != standby {
				log("A standby machine: waiting for a claim to take it, holding no credential")
				ctx, delay = standby, firstRetry
			}
			t := time.NewTimer(standbyRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("standby ended before a claim took the machine: %w", ctx.Err())
			case <-t.C:
			}
			continue
		}
		if !retry {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no credentials from %s after %s: %w", endpoint, time.Since(a.started).Round(time.Second), err)
		}
		log("The credential endpoint is not ready (%v); trying again in %s", err, delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("no credentials from %s after %s: %w", endpoint, time.Since(a.started).Round(time.Second), err)
		case <-t.C:
		}
		delay = min(2*delay, maxRetry)
	}
}

// post makes one request; retry says whether another may succeed.
func post(ctx context.Context, client *http.Client, endpoint string) (creds spire.Credentials, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, http.NoBody)
	if err != nil {
		return nil, false, err
	}
	res, err := client.Do(req)
	if err != nil {
		if errors.Is(err, errWrongEndpoint) {
			return nil, false, err
		}
		return nil, true, err
	}
	defer func() { _ = res.Body.Close() }()
	switch res.StatusCode {
	case http.StatusOK:
		creds, err := decodeCredentials(res.Body)
		return creds, false, err
	case http.StatusNoContent:
		return nil, false, nil
	case http.StatusAccepted:
		return nil, true, errStandby
	case http.StatusServiceUnavailable:
		return nil, true, fmt.Errorf("%d %s", res.StatusCode, message(res.Body))
	}
	return nil, false, fmt.Errorf("the credential endpoint %s answered %d %s: %s", endpoint, res.StatusCode, http.StatusText(res.StatusCode), message(res.Body))
}

// message is the start of an error answer's body, quoted so it cannot
// forge console lines.
func message(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, maxMessage))
	return fmt.Sprintf("%q", strings.TrimSpace(string(b)))
}

// decodeCredentials reads a JSON object of strings, at most
// maxCredentials bytes. Its errors never quote the body: it holds secrets.
func decodeCredentials(body io.Reader) (spire.Credentials, error) {
	data, err := io.ReadAll(io.LimitReader(body, maxCredentials+1))
	if err != nil {
		return nil, fmt.Errorf("reading the credentials: %w", err)
	}
	if len(data) > maxCredentials {
		return nil, fmt.Errorf("the credentials are larger than %d bytes", maxCredentials)
	}
	var creds spire.Credentials
	if err := json.Unmarshal(data, &creds); err != nil || creds == nil {
		return nil, errors.New("the credential endpoint's answer is not a JSON object of strings")
	}
	return creds, nil
}

func names(c spire.Credentials) []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// applyCredentials fills the runner's credential from the endpoint's
// answer: jitConfig, or token (and url, where bootstrap.json has none). A
// name this agent does not know is an error: it would be a credential
// meant for something that does not get it.
func applyCredentials(c *Config, creds spire.Credentials) error {
	var unknown []string
	for _, name := range names(creds) {
		v := creds[name]
		switch name {
		case "jitConfig":
			c.JITConfig = v
		case "token":
			c.Token = v
		case "url":
			if c.URL == "" {
				c.URL = v
			}
		default:
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("the credential endpoint sent credentials this agent does not know: %s (want jitConfig, or token and url)", strings.Join(unknown, ", "))
	}
	if err := c.Validate(false); err != nil {
		return fmt.Errorf("with the credential endpoint's credentials: %w", err)
	}
	return nil
}
