package supabase

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
)

// postgrest is a stand-in Supabase that checks every request has the shape
// PostgREST needs for an upsert, and stores the rows it accepted.
type postgrest struct {
	t       *testing.T
	key     string
	mu      sync.Mutex
	rows    map[string]Row
	fail    int // answer 503 to this many requests first
	refused int
}

func (p *postgrest) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	check := func(ok bool, what string) bool {
		if !ok {
			p.t.Errorf("request %s %s: %s", r.Method, r.URL, what)
			http.Error(w, what, http.StatusBadRequest)
		}
		return ok
	}
	if !check(r.Method == http.MethodPost, "method is not POST") ||
		!check(r.URL.Path == "/rest/v1/"+Table, "path is not /rest/v1/"+Table) ||
		!check(r.URL.Query().Get("on_conflict") == "id", "on_conflict=id missing") ||
		!check(strings.Contains(r.Header.Get("Prefer"), "resolution=merge-duplicates"), "Prefer: resolution=merge-duplicates missing") ||
		!check(r.Header.Get("Content-Type") == "application/json", "Content-Type is not application/json") {
		return
	}
	if r.Header.Get("apikey") != p.key || r.Header.Get("Authorization") != "Bearer "+p.key {
		p.refused++
		http.Error(w, `{"message":"Invalid API key"}`, http.StatusUnauthorized)
		return
	}
	if p.fail > 0 {
		p.fail--
		http.Error(w, "upstream down", http.StatusServiceUnavailable)
		return
	}
	var rows []Row
	if !check(json.NewDecoder(r.Body).Decode(&rows) == nil, "body is not a JSON array of rows") {
		return
	}
	if p.rows == nil {
		p.rows = map[string]Row{}
	}
	for _, row := range rows {
		p.rows[row.ID] = row
	}
	w.WriteHeader(http.StatusCreated)
}

func (p *postgrest) row(id string) (Row, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.rows[id]
	return r, ok
}

func startExporter(t *testing.T, e *Exporter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestUpsertShapeRetryAndLatestWins(t *testing.T) {
	srv := &postgrest{t: t, key: "service-key-1", fail: 2}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e := &Exporter{
		Credentials: func(context.Context) (Credentials, bool, error) {
			return Credentials{URL: hs.URL + "/", Key: "service-key-1"}, true, nil
		},
		Log: logr.Discard(), MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}
	startExporter(t, e)
	e.Enqueue(Row{ID: "desk-1", Namespace: "ns", Status: "provisioning"})
	e.Enqueue(Row{ID: "desk-1", Namespace: "ns", Status: "running", IPAddress: "10.0.0.9"})
	eventually.True(t, 10*time.Second, "desk-1 running exported after two 503s", func() bool {
		r, ok := srv.row("desk-1")
		return ok && r.Status == "running" && r.IPAddress == "10.0.0.9"
	})
	eventually.True(t, 10*time.Second, "nothing pending", func() bool { return e.Pending() == 0 })
}

func TestEnqueueNeverBlocksOnAHungSupabase(t *testing.T) {
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	defer hs.Close()
	defer close(release)
	e := &Exporter{
		Credentials: func(context.Context) (Credentials, bool, error) {
			return Credentials{URL: hs.URL, Key: "k"}, true, nil
		},
		HTTPClient: &http.Client{Timeout: 200 * time.Millisecond},
		Log:        logr.Discard(), MinBackoff: 10 * time.Millisecond,
	}
	startExporter(t, e)
	start := time.Now()
	for i := range 1000 {
		e.Enqueue(Row{ID: "desk", Status: "running", TimeoutMs: int64(i)})
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("1000 enqueues took %s while Supabase hangs", d)
	}
	if n := e.Pending(); n > 1 {
		t.Fatalf("pending = %d; rows of one desk must collapse to its latest", n)
	}
}

func TestRotatedKeyIsUsedAndUnconfiguredDrops(t *testing.T) {
	srv := &postgrest{t: t, key: "new-key"}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var mu sync.Mutex
	key, configured := "old-key", true
	e := &Exporter{
		Credentials: func(context.Context) (Credentials, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return Credentials{URL: hs.URL, Key: key}, configured, nil
		},
		Log: logr.Discard(), MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
	}
	startExporter(t, e)
	e.Enqueue(Row{ID: "d", Status: "running"})
	eventually.True(t, 10*time.Second, "the old key refused", func() bool { srv.mu.Lock(); defer srv.mu.Unlock(); return srv.refused > 0 })
	// A 401 is not retried with the same rows; the next status carries on.
	mu.Lock()
	key = "new-key"
	mu.Unlock()
	e.Enqueue(Row{ID: "d", Status: "terminated"})
	eventually.True(t, 10*time.Second, "exported with the rotated key", func() bool { r, ok := srv.row("d"); return ok && r.Status == "terminated" })

	mu.Lock()
	configured = false
	mu.Unlock()
	e.Enqueue(Row{ID: "other", Status: "running"})
	eventually.True(t, 10*time.Second, "dropped when unconfigured", func() bool { return e.Pending() == 0 })
	if _, ok := srv.row("other"); ok {
		t.Fatal("a row was sent although export is not configured")
	}
}
