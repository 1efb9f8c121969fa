package simkit_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// safety bounds a wait that should end at once; it only turns a hang into a
// failure.
const safety = 10 * time.Second

// world stands for a simulator: its state lock and a Base.
type world struct {
	mu  sync.Mutex
	kit *simkit.Base
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{}
	w.kit = simkit.New(simkit.Options{Name: "testsim"}, &w.mu)
	t.Cleanup(w.kit.Close)
	return w
}

// flag reads a bool that work sets with the state lock held.
func (w *world) flag(b *bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return *b
}

// get answers the body of a GET that must succeed.
func get(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func within(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(safety):
		t.Fatalf("%s did not happen", what)
	}
}

func closeInBackground(kit *simkit.Base) <-chan struct{} {
	done := make(chan struct{})
	go func() { kit.Close(); close(done) }()
	return done
}

func TestServePlainHTTP(t *testing.T) {
	w := newWorld(t)
	if got := w.kit.URL(); got != "" {
		t.Fatalf("URL before Serve = %q", got)
	}
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(rw, "hello "+r.URL.Path) })
	if err := w.kit.Serve("127.0.0.1:0", h, simkit.ServeConfig{Path: "/api/"}); err != nil {
		t.Fatal(err)
	}
	url := w.kit.URL()
	if !regexp.MustCompile(`^http://127\.0\.0\.1:\d+/api/$`).MatchString(url) {
		t.Fatalf("URL = %q", url)
	}
	if body := get(t, http.DefaultClient, url+"x"); body != "hello /api/x" {
		t.Errorf("answer %q", body)
	}

	err := w.kit.Serve("127.0.0.1:0", h, simkit.ServeConfig{})
	if err == nil || err.Error() != "testsim: server already started" {
		t.Errorf("second Serve: %v", err)
	}
	w.kit.Close()
	if resp, err := http.Get(url); err == nil {
		_ = resp.Body.Close()
		t.Error("the server still answers after Close")
	}
	err = w.kit.Serve("127.0.0.1:0", h, simkit.ServeConfig{})
	if err == nil || err.Error() != "testsim: server is closed" {
		t.Errorf("Serve after Close: %v", err)
	}
}

func TestServeUnspecifiedHostIsReachedOnLoopback(t *testing.T) {
	w := newWorld(t)
	if err := w.kit.Serve(":0", http.NotFoundHandler(), simkit.ServeConfig{Path: "/"}); err != nil {
		t.Fatal(err)
	}
	if url := w.kit.URL(); !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("URL = %q, want the loopback address", url)
	}
}

func TestServeListenError(t *testing.T) {
	w := newWorld(t)
	err := w.kit.Serve("256.0.0.1:0", http.NotFoundHandler(), simkit.ServeConfig{})
	if err == nil || !strings.HasPrefix(err.Error(), "testsim: listen on 256.0.0.1:0: ") {
		t.Fatalf("Serve on a bad address: %v", err)
	}
	if w.kit.URL() != "" {
		t.Error("a failed Serve left a URL")
	}
}

func TestServeTLSWithoutHTTP2(t *testing.T) {
	w := newWorld(t)
	// httptest's certificate is valid for 127.0.0.1; its client trusts it.
	ts := httptest.NewTLSServer(http.NotFoundHandler())
	cert, pool := ts.TLS.Certificates[0], x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	ts.Close()
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(rw, r.Proto) })
	if err := w.kit.Serve("127.0.0.1:0", h, simkit.ServeConfig{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, Path: "/api2/json"}); err != nil {
		t.Fatal(err)
	}
	url := w.kit.URL()
	if !regexp.MustCompile(`^https://127\.0\.0\.1:\d+/api2/json$`).MatchString(url) {
		t.Fatalf("URL = %q", url)
	}
	// The client offers HTTP/2; the server must still answer over HTTP/1.1,
	// where a fault can hijack the connection.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	if body := get(t, client, url); body != "HTTP/1.1" {
		t.Errorf("served over %q", body)
	}
}

func TestCloseEndsHungAndDelayedRequests(t *testing.T) {
	w := newWorld(t)
	arrived := make(chan string, 2)
	var slept bool
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !w.kit.Enter() {
			http.Error(rw, "closed", http.StatusServiceUnavailable)
			return
		}
		defer w.kit.Leave()
		arrived <- r.URL.Path
		switch r.URL.Path {
		case "/hang":
			w.kit.Hang(r.Context())
		case "/sleep":
			full := w.kit.Sleep(r.Context(), time.Hour)
			w.mu.Lock()
			slept = full
			w.mu.Unlock()
		}
		simkit.DropConnection(rw)
	})
	if err := w.kit.Serve("127.0.0.1:0", h, simkit.ServeConfig{Path: "/"}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for _, p := range []string{"hang", "sleep"} {
		go func() {
			resp, err := http.Get(w.kit.URL() + p) // no deadline: only Close ends it
			if err == nil {
				_ = resp.Body.Close()
			}
			errs <- err
		}()
	}
	<-arrived
	<-arrived

	within(t, "Close", closeInBackground(w.kit))
	for range 2 {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a held request got an answer")
			}
		case <-time.After(safety):
			t.Fatal("a held request was not ended by Close")
		}
	}
	if w.flag(&slept) {
		t.Error("Sleep reported the full hour")
	}
}

func TestEnterAfterCloseIsRefused(t *testing.T) {
	w := newWorld(t)
	if !w.kit.Enter() {
		t.Fatal("Enter refused before Close")
	}
	closed := closeInBackground(w.kit)
	eventually.True(t, safety, "Close to begin", w.kit.Closed)
	select {
	case <-closed:
		t.Fatal("Close returned while a handler was still in")
	default:
	}
	if w.kit.Enter() {
		t.Error("Enter admitted a handler after Close")
	}
	w.kit.Leave()
	within(t, "Close after the last handler left", closed)
}

func TestSleepEndsWithTheClient(t *testing.T) {
	w := newWorld(t)
	if !w.kit.Sleep(context.Background(), 0) {
		t.Error("a zero delay was not served in full")
	}
	if !w.kit.Sleep(context.Background(), time.Millisecond) {
		t.Error("a short delay was not served in full")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if w.kit.Sleep(ctx, time.Hour) {
		t.Error("Sleep outlasted its client")
	}
	done := make(chan struct{})
	go func() { w.kit.Hang(ctx); close(done) }()
	within(t, "Hang to end with its client", done)
}

func TestAfterRunsWorkWithTheStateLockHeld(t *testing.T) {
	w := newWorld(t)
	ran := make(chan bool, 1)
	w.mu.Lock()
	w.kit.After(0, func() { ran <- !w.mu.TryLock() })
	w.mu.Unlock()
	select {
	case locked := <-ran:
		if !locked {
			t.Error("the work ran without the state lock")
		}
	case <-time.After(safety):
		t.Fatal("the work did not run")
	}
}

func TestCloseStopsPendingTimers(t *testing.T) {
	w := newWorld(t)
	var ran bool
	w.mu.Lock()
	w.kit.After(time.Hour, func() { ran = true })
	w.mu.Unlock()
	within(t, "Close with a timer pending", closeInBackground(w.kit))
	w.kit.After(0, func() { ran = true }) // after Close: never runs
	w.kit.Close()                         // twice is fine
	if w.flag(&ran) {
		t.Error("work ran after Close")
	}
}

func TestCloseWaitsForWorkersAndCancelsContext(t *testing.T) {
	w := newWorld(t)
	var stopped bool
	w.kit.Go(func() {
		<-w.kit.Closing()
		<-w.kit.Context().Done()
		w.mu.Lock()
		stopped = true
		w.mu.Unlock()
	})
	within(t, "Close", closeInBackground(w.kit))
	if !w.flag(&stopped) {
		t.Error("Close returned before the worker")
	}
	if !errors.Is(w.kit.Context().Err(), context.Canceled) {
		t.Errorf("Context after Close: %v", w.kit.Context().Err())
	}
	started := false
	w.kit.Go(func() { started = true })
	if started {
		t.Error("Go started a worker after Close")
	}
}

func TestDropConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { simkit.DropConnection(rw) }))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("a dropped request got %s", resp.Status)
	}

	// Without a hijackable connection the response is aborted.
	rec := httptest.NewRecorder()
	defer func() {
		r := recover()
		if err, _ := r.(error); !errors.Is(err, http.ErrAbortHandler) {
			t.Errorf("recovered %v, want http.ErrAbortHandler", r)
		}
	}()
	simkit.DropConnection(rec)
}

func TestRandomUUID(t *testing.T) {
	shape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := simkit.RandomUUID(), simkit.RandomUUID()
	if !shape.MatchString(a) || !shape.MatchString(b) {
		t.Errorf("not version 4 UUIDs: %q, %q", a, b)
	}
	if a == b {
		t.Error("two UUIDs are equal")
	}
}
