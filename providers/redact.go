package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// redacted replaces a credential an endpoint sent back.
const redacted = "[redacted]"

// minSecret is the shortest piece of a credential header treated as secret:
// shorter ones ("token", "Bearer") are words an error message may use.
const minSecret = 8

// RedactingTransport removes the request's own credentials from the body
// of every error answer. An endpoint is chosen by whoever wrote the object
// (a tenant's HypervisorCluster endpoint or RunnerPool apiURL), and the
// message of its error answer reaches status, events and logs: an endpoint
// that echoes the Authorization header back must not turn a credential
// into status text that anyone allowed to read the object can see.
// Successful answers are passed as they are.
type RedactingTransport struct {
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *RedactingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.Base.RoundTrip(req)
	if err != nil || res.StatusCode < 400 || res.Body == nil {
		return res, err
	}
	secrets := credentialPieces(req.Header)
	if len(secrets) == 0 {
		return res, nil
	}
	// Error bodies are small, and the transport below bounds them.
	body, readErr := io.ReadAll(res.Body)
	_ = res.Body.Close()
	for _, s := range secrets {
		body = bytes.ReplaceAll(body, []byte(s), []byte(redacted))
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	res.ContentLength = int64(len(body))
	res.Header.Set("Content-Length", strconv.Itoa(len(body)))
	if readErr != nil {
		return nil, readErr
	}
	return res, nil
}

// credentialPieces are the values of the request's credential headers, and
// their parts after a scheme ("Bearer x") or after any "=" of a name
// ("PVEAPIToken=id=x", where x may itself hold "=", as base64 does), each
// also as a JSON string, a Go-quoted string and URL-encoded carry it (an
// endpoint that echoes a credential in a JSON message escapes its quotes,
// backslashes and HTML characters), longest first so a whole value is
// replaced before its parts.
func credentialPieces(h http.Header) []string {
	var out []string
	seen := map[string]bool{}
	addForm := func(s string) {
		if len(s) >= minSecret && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	add := func(s string) {
		if s = strings.TrimSpace(s); len(s) >= minSecret {
			addForm(s)
			for _, escapeHTML := range []bool{true, false} {
				var b bytes.Buffer
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(escapeHTML)
				_ = enc.Encode(s)
				addForm(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(b.String(), "\n"), `"`), `"`))
			}
			addForm(strings.Trim(strconv.Quote(s), `"`))
			addForm(url.QueryEscape(s))
			addForm(url.PathEscape(s))
		}
	}
	for _, name := range []string{"Authorization", "Cookie", "Apikey", "CSRFPreventionToken"} {
		for _, v := range h.Values(name) {
			add(v)
			if _, rest, ok := strings.Cut(v, " "); ok {
				add(rest)
			}
			for i := range len(v) {
				if v[i] == '=' {
					add(v[i+1:])
				}
			}
			for _, part := range strings.Split(v, ";") {
				if _, val, ok := strings.Cut(part, "="); ok {
					add(val)
				}
			}
		}
	}
	// Longest first: replacing a part first would leave the rest of the
	// whole value behind.
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// WithoutBodies is ctx with its logger capped below verbosity 8, where
// client-go logs whole request and response bodies (a Secret's data, in
// JSON or as a hex dump of protobuf). Every read and write of a Secret goes
// through it, so no verbosity the operator is run at puts Secret bytes in
// its log.
func WithoutBodies(ctx context.Context) context.Context {
	sink := logr.FromContextOrDiscard(ctx).GetSink()
	if sink == nil {
		return logr.NewContext(ctx, logr.Discard())
	}
	return logr.NewContext(ctx, logr.New(cappedSink{LogSink: sink}))
}

// bodyLevel is the verbosity at which client-go logs bodies.
const bodyLevel = 8

// cappedSink drops messages at bodyLevel and above.
type cappedSink struct{ logr.LogSink }

func (c cappedSink) Enabled(level int) bool { return level < bodyLevel && c.LogSink.Enabled(level) }

func (c cappedSink) Info(level int, msg string, kv ...any) {
	if level < bodyLevel {
		c.LogSink.Info(level, msg, kv...)
	}
}

func (c cappedSink) WithValues(kv ...any) logr.LogSink {
	return cappedSink{c.LogSink.WithValues(kv...)}
}

func (c cappedSink) WithName(name string) logr.LogSink { return cappedSink{c.LogSink.WithName(name)} }
