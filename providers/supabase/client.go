// Package supabase exports Cyberdesk status to a Supabase project through
// its REST (PostgREST) API, as the Kopf operator did: one row per desktop in
// the cyberdesk_instances table, upserted on every status change.
package supabase

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Table is the table the Cyberdesk operator has always written.
const Table = "cyberdesk_instances"

// Credentials reach one Supabase project.
type Credentials struct {
	// URL of the project, e.g. https://abcd.supabase.co.
	URL string
	// Key is the service-role (or anon) API key; it is sent as apikey and
	// as the bearer token, never logged.
	Key string
}

// Row is one desktop's status as the cyberdesk_instances table holds it.
type Row struct {
	ID          string     `json:"id"`
	Namespace   string     `json:"namespace"`
	Status      string     `json:"status"`
	VMName      string     `json:"vm_name,omitempty"`
	IPAddress   string     `json:"ip_address,omitempty"`
	NodeName    string     `json:"node_name,omitempty"`
	TimeoutMs   int64      `json:"timeout_ms"`
	StartTime   *time.Time `json:"start_time,omitempty"`
	ExpiryTime  *time.Time `json:"expiry_time,omitempty"`
	Message     string     `json:"status_message,omitempty"`
	UpdatedTime time.Time  `json:"updated_at"`
}

// StatusError is a non-2xx answer; Retryable says whether trying again can help.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("supabase answered %d: %s", e.Code, e.Body)
}

// Retryable is true for throttling and server errors.
func (e *StatusError) Retryable() bool {
	return e.Code == http.StatusTooManyRequests || e.Code == http.StatusRequestTimeout || e.Code >= 500
}

// MaxResponseBytes bounds what is read of one Supabase answer: an upsert
// asks for return=minimal, so a success has no body and an error is one
// short JSON document.
const MaxResponseBytes = 1 << 20

// NewHTTPClient is the client an Exporter sends with: timeout bounds one
// request (providers.DefaultRequestTimeout when zero), the headers must
// come within providers.DefaultResponseHeaderTimeout (or timeout, if
// shorter), and bodies are bounded by MaxResponseBytes.
func NewHTTPClient(timeout time.Duration) *http.Client {
	if timeout <= 0 {
		timeout = providers.DefaultRequestTimeout
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.DialContext = providers.Dialer().DialContext
	base.TLSHandshakeTimeout = providers.TLSHandshakeTimeout
	base.ResponseHeaderTimeout = min(providers.DefaultResponseHeaderTimeout, timeout)
	return &http.Client{Timeout: timeout, Transport: &providers.RedactingTransport{Base: &providers.BoundedTransport{Base: base, MaxBody: MaxResponseBytes}}}
}

// Upsert writes rows into table, merging on the id column: PostgREST's
// POST with Prefer: resolution=merge-duplicates and on_conflict=id.
func Upsert(ctx context.Context, hc *http.Client, creds Credentials, table string, rows []Row) error {
	base, err := url.Parse(strings.TrimRight(creds.URL, "/"))
	if err != nil || base.Scheme == "" || base.Host == "" {
		return fmt.Errorf("supabase URL %q is not an absolute URL", creds.URL)
	}
	endpoint := base.JoinPath("rest", "v1", table)
	endpoint.RawQuery = url.Values{"on_conflict": {"id"}}.Encode()
	body, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("apikey", creds.Key)
	req.Header.Set("Authorization", "Bearer "+creds.Key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "resolution=merge-duplicates,return=minimal")
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("supabase upsert into %s: %w", table, err)
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode/100 == 2 {
		// Drained (bounded) so the connection is reused; a body past the
		// bound ends the drain and the connection is dropped instead.
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, MaxResponseBytes))
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	return &StatusError{Code: res.StatusCode, Body: strings.TrimSpace(string(msg))}
}
