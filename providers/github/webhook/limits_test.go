package webhook

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// countingReader serves n bytes of 'x' (n < 0: without end) and counts
// what was read.
type countingReader struct {
	n    int64
	read atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= 0 && c.read.Load() >= c.n {
		return 0, io.EOF
	}
	for i := range p {
		p[i] = 'x'
	}
	c.read.Add(int64(len(p)))
	return len(p), nil
}

func post(r http.Handler, contentType string, body io.Reader, sig string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, Path, body)
	req.Header.Set("X-GitHub-Event", "workflow_job")
	req.Header.Set("X-GitHub-Delivery", "")
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Hub-Signature-256", sig)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	return w
}

// GitHub's own example of a workflow_job delivery, in both encodings a
// webhook may be set to (JSON, and the UI's default form encoding, whose
// field "payload" is the JSON), each signed over its raw body, is accepted
// and parsed; a form signed over the JSON inside it is not.
func TestRealDeliveryInBothEncodings(t *testing.T) {
	payload, err := os.ReadFile("testdata/workflow_job.queued.json")
	if err != nil {
		t.Fatal(err)
	}
	form := []byte("payload=" + url.QueryEscape(string(payload)))
	for _, tc := range []struct {
		name, contentType string
		body              []byte
	}{
		{"json", "application/json", payload},
		{"form", "application/x-www-form-urlencoded", form},
		{"json with charset", "application/json; charset=utf-8", payload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			r := &Receiver{Secret: anyScope, Handle: rec.handle, Log: logr.Discard()}
			if w := post(r, tc.contentType, bytes.NewReader(tc.body), Sign(secret, tc.body)); w.Code != http.StatusAccepted {
				t.Fatalf("answered %d %s, want 202", w.Code, strings.TrimSpace(w.Body.String()))
			}
			if rec.count() != 1 {
				t.Fatalf("%d jobs handled, want 1", rec.count())
			}
			j := rec.jobs[0]
			if j.ID != 289782451 || j.RunID != 2202229078 || j.Action != github.JobQueued || j.Owner != "Octocoders" ||
				j.Repository != "Hello-World" || strings.Join(j.Labels, ",") != "ubuntu-latest" || j.RunnerName != "GitHub Actions 5" ||
				j.Host != github.PublicAPIHost {
				t.Errorf("parsed job = %+v", j)
			}
		})
	}
	r := &Receiver{Secret: anyScope, Handle: (&recorder{}).handle, Log: logr.Discard()}
	if w := post(r, "application/x-www-form-urlencoded", bytes.NewReader(form), Sign(secret, payload)); w.Code != http.StatusUnauthorized {
		t.Errorf("a form signed over its JSON rather than its raw body answered %d, want 401", w.Code)
	}
	if w := post(r, "text/plain", bytes.NewReader(payload), Sign(secret, payload)); w.Code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain answered %d, want 415", w.Code)
	}
}

// With the default limit, a body larger than any real delivery is refused
// as it is read, having read not much more than the limit, and before any
// secret is looked up; one that declares its size is refused unread.
func TestOversizedDeliveryIsRefusedWhileReading(t *testing.T) {
	var lookups atomic.Int32
	r := &Receiver{
		Secret: func(context.Context, Scope) ([]byte, error) { lookups.Add(1); return secret, nil },
		Handle: (&recorder{}).handle, Log: logr.Discard(),
	}
	endless := &countingReader{n: -1}
	// Without a Content-Length (chunked): cut off while reading.
	if w := post(r, "application/json", io.NopCloser(endless), "sha256=00"); w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("endless body answered %d, want 413", w.Code)
	}
	const limit = 256 << 10
	if n := endless.read.Load(); n > limit+64<<10 {
		t.Errorf("read %d bytes of an oversized body; the limit is %d", n, limit)
	}
	declared := &countingReader{n: limit + 1}
	req := httptest.NewRequest(http.MethodPost, Path, declared)
	req.ContentLength = limit + 1
	req.Header.Set("X-GitHub-Event", "workflow_job")
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if w.Code != http.StatusRequestEntityTooLarge || declared.read.Load() != 0 {
		t.Errorf("a declared %d-byte body answered %d having read %d bytes; want 413 and nothing read", limit+1, w.Code, declared.read.Load())
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("the secret was looked up %d times for oversized bodies", n)
	}
}

// The bound on requests in flight holds before the signature is checked:
// with every slot held by a sender that has not finished its body, one
// more request is answered 503 at once, its body unread and no secret
// looked up.
func TestRequestsInFlightAreBoundedBeforeTheSignature(t *testing.T) {
	var lookups atomic.Int32
	r := &Receiver{
		Secret: func(context.Context, Scope) ([]byte, error) { lookups.Add(1); return secret, nil },
		Handle: (&recorder{}).handle, Log: logr.Discard(), MaxInFlight: 1,
	}
	slow, feed := io.Pipe()
	first := make(chan int, 1)
	go func() { first <- post(r, "application/json", slow, "sha256=00").Code }()
	// The first request is reading its body once this write is taken.
	if _, err := feed.Write([]byte(`{"action":`)); err != nil {
		t.Fatal(err)
	}
	body := []byte(queuedPayload)
	second := &countingReader{n: int64(len(body))}
	w := post(r, "application/json", second, Sign(secret, body))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a request beyond the bound answered %d (Retry-After %q), want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if second.read.Load() != 0 || lookups.Load() != 0 {
		t.Errorf("the refused request had %d bytes read and %d secret lookups; want none", second.read.Load(), lookups.Load())
	}
	_ = feed.CloseWithError(io.ErrUnexpectedEOF)
	if c := <-first; c/100 == 2 {
		t.Errorf("the unfinished body answered %d", c)
	}
	// The slot is free again.
	if w := deliver(r, "workflow_job", "after", body, Sign(secret, body)); w.Code != http.StatusAccepted {
		t.Errorf("after the slow sender left: %d, want 202", w.Code)
	}
}

// Each scope's deliveries verify only with that scope's secret: the most
// specific key of the webhook Secret present for the delivery's repository
// owner (and repository) must verify it, so another organization's secret,
// or the shared one where the scope has its own, forges nothing.
func TestOneScopesSecretCannotForgeAnothersJobs(t *testing.T) {
	data := map[string][]byte{
		"webhookSecret":                            []byte("shared"),
		"webhookSecret.octo-org":                   []byte("octo"),
		"webhookSecret.evil-org":                   []byte("evil"),
		"webhookSecret.octocoders.hello-world":     []byte("hello"),
		"webhookSecret.octocoders":                 []byte("coders"),
		"webhookSecret.empty-org":                  []byte(""),
		"webhookSecret.octo-org.example-workflow2": []byte("other-repo"),
	}
	scoped := func(_ context.Context, s Scope) ([]byte, error) { return ScopedSecret(data, "webhookSecret", s) }
	real, err := os.ReadFile("testdata/workflow_job.queued.json")
	if err != nil {
		t.Fatal(err)
	}
	octo := []byte(queuedPayload) // octo-org/example-workflow
	elsewhere := []byte(strings.NewReplacer("octo-org", "initech").Replace(queuedPayload))
	mismatched := []byte(strings.Replace(queuedPayload, `"organization": {"login": "octo-org"`, `"organization": {"login": "evil-org"`, 1))
	empty := []byte(strings.NewReplacer("octo-org", "empty-org").Replace(queuedPayload))
	cases := []struct {
		name string
		body []byte
		key  string
		code int
	}{
		{"own organization's secret", octo, "octo", http.StatusAccepted},
		{"another organization's secret", octo, "evil", http.StatusUnauthorized},
		{"the shared secret where the organization has its own", octo, "shared", http.StatusUnauthorized},
		{"another repository's secret of the same organization", octo, "other-repo", http.StatusUnauthorized},
		{"a scope with no key of its own: the shared secret", elsewhere, "shared", http.StatusAccepted},
		{"a scope with no key of its own: another's secret", elsewhere, "octo", http.StatusUnauthorized},
		{"repository key before the owner's", real, "hello", http.StatusAccepted},
		{"the owner's key where the repository has its own", real, "coders", http.StatusUnauthorized},
		{"organization other than the repository's owner", mismatched, "evil", http.StatusUnauthorized},
		{"organization other than the repository's owner, owner's secret", mismatched, "octo", http.StatusUnauthorized},
		{"an empty key verifies nothing", empty, "", http.StatusUnauthorized},
	}
	for _, tc := range cases {
		for _, form := range []bool{false, true} {
			body, ct := tc.body, "application/json"
			if form {
				body, ct = []byte("payload="+url.QueryEscape(string(tc.body))), "application/x-www-form-urlencoded"
			}
			rec := &recorder{}
			r := &Receiver{Secret: scoped, Handle: rec.handle, Log: logr.Discard()}
			w := post(r, ct, bytes.NewReader(body), Sign([]byte(tc.key), body))
			if w.Code != tc.code || (tc.code != http.StatusAccepted && rec.count() != 0) {
				t.Errorf("%s (%s): %d with %d jobs handled, want %d", tc.name, ct, w.Code, rec.count(), tc.code)
			}
		}
	}
	// No shared key: a scope without its own secret is refused.
	delete(data, "webhookSecret")
	r := &Receiver{Secret: scoped, Handle: (&recorder{}).handle, Log: logr.Discard()}
	if w := post(r, "application/json", bytes.NewReader(elsewhere), Sign([]byte("shared"), elsewhere)); w.Code != http.StatusUnauthorized {
		t.Errorf("a scope without a secret, no shared key: %d, want 401", w.Code)
	}
}
