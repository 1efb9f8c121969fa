package providers

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
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
// their parts after a scheme ("Bearer x") or a name ("PVEAPIToken=id=x"),
// longest first so a whole value is replaced before its parts.
func credentialPieces(h http.Header) []string {
	var out []string
	add := func(s string) {
		if s = strings.TrimSpace(s); len(s) >= minSecret {
			out = append(out, s)
		}
	}
	for _, name := range []string{"Authorization", "Cookie", "Apikey", "CSRFPreventionToken"} {
		for _, v := range h.Values(name) {
			add(v)
			if _, rest, ok := strings.Cut(v, " "); ok {
				add(rest)
			}
			if i := strings.LastIndexByte(v, '='); i >= 0 {
				add(v[i+1:])
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
