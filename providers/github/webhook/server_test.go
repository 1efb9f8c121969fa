package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	gogithub "github.com/google/go-github/v60/github"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

var secret = []byte("it's a secret to everybody")

// anyScope verifies every scope with secret.
func anyScope(context.Context, Scope) ([]byte, error) { return secret, nil }

// Sign is the X-Hub-Signature-256 GitHub sends for body: HMAC-SHA256 of the
// raw body under the secret, in hex.
func Sign(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// A real workflow_job "queued" delivery, trimmed of fields we do not read.
const queuedPayload = `{
  "action": "queued",
  "workflow_job": {
    "id": 29679449, "run_id": 10373599123, "workflow_name": "CI", "head_branch": "main",
    "run_url": "https://api.github.com/repos/octo-org/example-workflow/actions/runs/10373599123",
    "status": "queued", "conclusion": null, "started_at": "2024-08-12T20:10:04Z", "completed_at": null,
    "name": "build", "steps": [], "labels": ["self-hosted", "linux", "x64", "gpu"],
    "runner_id": null, "runner_name": null, "runner_group_id": null, "runner_group_name": null
  },
  "repository": {"id": 1296269, "name": "example-workflow", "full_name": "octo-org/example-workflow", "private": true,
                 "owner": {"login": "octo-org", "id": 1, "type": "Organization"}},
  "organization": {"login": "octo-org", "id": 1},
  "sender": {"login": "octocat", "id": 583231, "type": "User"}
}`

type recorder struct {
	mu   sync.Mutex
	jobs []github.JobEvent
}

func (r *recorder) handle(_ context.Context, j github.JobEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs = append(r.jobs, j)
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

func newReceiver(t *testing.T, rec *recorder) *Receiver {
	t.Helper()
	r := &Receiver{
		Secret: anyScope,
		Handle: rec.handle, Log: logr.Discard(), MaxBodyBytes: 64 << 10,
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = r.Start(ctx) }()
	return r
}

func deliver(r http.Handler, event, delivery string, body []byte, sig string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("Content-Type", "application/json")
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	return w
}

func waitCount(t *testing.T, rec *recorder, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rec.count() != n {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d deliveries, want %d", rec.count(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeliveries(t *testing.T) {
	rec := &recorder{}
	r := newReceiver(t, rec)
	body := []byte(queuedPayload)

	if w := deliver(r, "workflow_job", "d-1", body, Sign(secret, body)); w.Code != http.StatusAccepted {
		t.Fatalf("signed delivery: %d %s", w.Code, w.Body)
	}
	waitCount(t, rec, 1)
	j := rec.jobs[0]
	if j.ID != 29679449 || j.Action != github.JobQueued || j.Owner != "octo-org" || j.Repository != "example-workflow" ||
		j.Organization != "octo-org" || strings.Join(j.Labels, ",") != "self-hosted,linux,x64,gpu" || j.Delivery != "d-1" {
		t.Errorf("parsed job = %+v", j)
	}

	cases := []struct {
		name, event, delivery string
		body                  []byte
		sig                   string
		code                  int
	}{
		{"redelivery of the same delivery", "workflow_job", "d-1", body, Sign(secret, body), http.StatusOK},
		{"no signature", "workflow_job", "d-2", body, "", http.StatusUnauthorized},
		{"forged signature", "workflow_job", "d-3", body, Sign([]byte("guess"), body), http.StatusUnauthorized},
		{"signature of another body", "workflow_job", "d-4", []byte(`{"action":"queued"}`), Sign(secret, body), http.StatusUnauthorized},
		{"sha1 header form", "workflow_job", "d-5", body, "sha1=" + strings.TrimPrefix(Sign(secret, body), "sha256="), http.StatusUnauthorized},
		{"ping", "ping", "d-6", []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`), Sign(secret, []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)), http.StatusOK},
		{"other event", "push", "d-7", []byte(`{}`), Sign(secret, []byte(`{}`)), http.StatusAccepted},
		{"malformed workflow_job", "workflow_job", "d-8", []byte(`{"action":"queued"}`), Sign(secret, []byte(`{"action":"queued"}`)), http.StatusBadRequest},
	}
	for _, tc := range cases {
		if w := deliver(r, tc.event, tc.delivery, tc.body, tc.sig); w.Code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, strings.TrimSpace(w.Body.String()), tc.code)
		}
	}
	big := bytes.Repeat([]byte("x"), 65<<10)
	if w := deliver(r, "workflow_job", "d-9", big, Sign(secret, big)); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized: %d, want 413", w.Code)
	}
	// A last good delivery is a marker: once it is handled, everything
	// before it was too, and only the two good ones may have reached the handler.
	if w := deliver(r, "workflow_job", "d-10", body, Sign(secret, body)); w.Code != http.StatusAccepted {
		t.Fatalf("marker delivery: %d", w.Code)
	}
	waitCount(t, rec, 2)
	if d := rec.jobs[1].Delivery; d != "d-10" {
		t.Errorf("second handled delivery is %s; only d-1 and d-10 are valid", d)
	}
}

func TestRotatedSecretIsUsed(t *testing.T) {
	rec := &recorder{}
	var mu sync.Mutex
	current := []byte("old")
	r := &Receiver{
		Secret: func(context.Context, Scope) ([]byte, error) { mu.Lock(); defer mu.Unlock(); return current, nil },
		Handle: rec.handle, Log: logr.Discard(),
	}
	body := []byte(queuedPayload)
	if w := deliver(r, "workflow_job", "a", body, Sign([]byte("old"), body)); w.Code != http.StatusAccepted {
		t.Fatalf("old secret: %d", w.Code)
	}
	mu.Lock()
	current = []byte("new")
	mu.Unlock()
	if w := deliver(r, "workflow_job", "b", body, Sign([]byte("old"), body)); w.Code != http.StatusUnauthorized {
		t.Errorf("old secret after rotation: %d, want 401", w.Code)
	}
	if w := deliver(r, "workflow_job", "c", body, Sign([]byte("new"), body)); w.Code != http.StatusAccepted {
		t.Errorf("new secret: %d", w.Code)
	}
}

// FuzzReceiver: whatever arrives, the receiver answers without panicking,
// and accepts nothing whose signature does not match.
func FuzzReceiver(f *testing.F) {
	f.Add("workflow_job", []byte(queuedPayload), true)
	f.Add("workflow_job", []byte(`{"action":"completed","workflow_job":{"id":1,"labels":null},"repository":{"name":"r"}}`), true)
	f.Add("ping", []byte(`{}`), false)
	f.Add("workflow_job", []byte(`{"workflow_job":{"id":-1}}`), true)
	f.Add("workflow_job", []byte("\x00\xff"), true)
	rec := &recorder{}
	r := &Receiver{Secret: anyScope, Handle: rec.handle, Log: logr.Discard(), MaxBodyBytes: 1 << 16}
	f.Fuzz(func(t *testing.T, event string, body []byte, signed bool) {
		sig := "sha256=00"
		if signed {
			sig = Sign(secret, body)
		}
		w := deliver(r, event, "", body, sig)
		if !signed && w.Code/100 == 2 {
			t.Fatalf("unsigned delivery answered %d", w.Code)
		}
	})
}

// FuzzParseWorkflowJob: a parsed job always has what routing needs.
func FuzzParseWorkflowJob(f *testing.F) {
	f.Add([]byte(queuedPayload))
	f.Add([]byte(`{"workflow_job":{"id":1},"repository":{"name":"r","full_name":"o/r"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := gogithub.ParseWebHook("workflow_job", body)
		if err != nil {
			return
		}
		wj, _ := ev.(*gogithub.WorkflowJobEvent)
		j, err := toJobEvent(wj)
		if err != nil {
			return
		}
		if j.ID <= 0 || j.Repository == "" || len(j.Labels) > maxLabels {
			t.Fatalf("accepted an incomplete job: %+v", j)
		}
	})
}

// A delivery is answered 2xx only once the handler recorded it; a failed
// record answers 503 and the same delivery, redelivered, is tried again.
func TestUnrecordedDeliveryIsRefusedAndRedeliverable(t *testing.T) {
	rec := &recorder{}
	fail := true
	var mu sync.Mutex
	r := &Receiver{
		Secret: anyScope,
		Handle: func(ctx context.Context, j github.JobEvent) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return errors.New("the API server is unreachable")
			}
			return rec.handle(ctx, j)
		},
		Log: logr.Discard(),
	}
	body := []byte(queuedPayload)
	if w := deliver(r, "workflow_job", "x-1", body, Sign(secret, body)); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("unrecorded delivery answered %d, want 503", w.Code)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if w := deliver(r, "workflow_job", "x-1", body, Sign(secret, body)); w.Code != http.StatusAccepted || rec.count() != 1 {
		t.Fatalf("redelivery answered %d with %d recorded, want 202 and 1", w.Code, rec.count())
	}
}

// Every replica receives: the receiver needs no leadership.
func TestEveryReplicaReceives(t *testing.T) {
	if (&Receiver{}).NeedLeaderElection() {
		t.Fatal("the receiver waits for leadership; deliveries reaching a follower would be refused")
	}
}

// Shutting down stops accepting but lets a delivery in flight be recorded
// and answered; Start returns only after.
func TestGracefulShutdownFinishesDeliveriesInFlight(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var recorded atomic.Bool
	r := &Receiver{
		Addr:   addr,
		Secret: anyScope,
		Handle: func(ctx context.Context, _ github.JobEvent) error {
			close(entered)
			<-release
			if ctx.Err() != nil {
				return ctx.Err()
			}
			recorded.Store(true)
			return nil
		},
		Log: logr.Discard(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	body := []byte(queuedPayload)
	code := make(chan int, 1)
	go func() {
		eventually.True(t, 10*time.Second, "the receiver listening", func() bool {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				_ = c.Close()
			}
			return err == nil
		})
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+Path, bytes.NewReader(body))
		req.Header.Set("X-GitHub-Event", "workflow_job")
		req.Header.Set("X-GitHub-Delivery", "g-1")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Hub-Signature-256", Sign(secret, body))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			code <- 0
			return
		}
		_ = res.Body.Close()
		code <- res.StatusCode
	}()
	<-entered
	cancel() // the manager stops while the delivery is being recorded
	select {
	case err := <-stopped:
		t.Fatalf("Start returned (%v) with a delivery in flight", err)
	default:
	}
	close(release)
	if c := <-code; c != http.StatusAccepted || !recorded.Load() {
		t.Fatalf("the delivery in flight at shutdown answered %d, recorded %v; want 202, true", c, recorded.Load())
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
