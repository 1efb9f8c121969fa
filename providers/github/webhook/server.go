// Package webhook receives GitHub's webhook deliveries for the RunnerPool
// autoscaler: POST /github/webhook, signature checked against the secret,
// and the delivery's workflow_job handed to the Handler before it is
// answered, so a 2xx means the demand is recorded (in the API server) and
// an error answers 5xx, which GitHub shows as a failed delivery to
// redeliver. Nothing accepted lives only in this process's memory. A
// workflow_job delivery reaches the Handler as a github.JobEvent, the
// provider's demand type, so the autoscaler that consumes it depends on the
// provider and not on this receiver.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	gogithub "github.com/google/go-github/v60/github"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// Path is where GitHub posts deliveries.
const Path = "/github/webhook"

// DefaultMaxBodyBytes is the default body limit (Receiver.MaxBodyBytes).
const DefaultMaxBodyBytes = 256 << 10

// Results of a delivery, the result label of hyperfleet_webhook_deliveries_total.
const (
	ResultAccepted     = "accepted"
	ResultDuplicate    = "duplicate"
	ResultIgnored      = "ignored"
	ResultUnauthorized = "unauthorized"
	ResultBadRequest   = "bad_request"
	ResultTooLarge     = "too_large"
	// ResultQueueFull: MaxInFlight requests were in flight; answered 503 before the body was read.
	ResultQueueFull = "queue_full"
	ResultError     = "error"
)

var (
	deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_webhook_deliveries_total",
		Help: "GitHub webhook deliveries received, by event and result (accepted, duplicate, ignored, unauthorized, bad_request, too_large, queue_full, error: not recorded).",
	}, []string{"event", "result"})
)

// Registered when the package is linked, so the series exists on every
// replica, leader or not, from the start.
func init() { metrics.Registry.MustRegister(deliveries) }

// SecretFunc returns the secret that must verify a delivery from scope,
// read at each delivery so a rotated secret takes effect without a
// restart; ErrNoSecret when the scope has none (the delivery is refused).
// It must not be logged.
type SecretFunc func(ctx context.Context, scope Scope) ([]byte, error)

// Handler records one workflow_job delivery. It runs before the delivery
// is answered: nil answers 202, an error 503 (GitHub redelivers on request).
// It must be idempotent: GitHub may deliver the same job event twice, to
// any replica.
type Handler func(ctx context.Context, job github.JobEvent) error

// Receiver is the webhook HTTP server, a manager Runnable.
type Receiver struct {
	// Addr to listen on, e.g. ":9443"; "0" or empty disables the receiver.
	Addr string
	// Secret returns the secret that must verify a delivery of a scope
	// (ScopedSecret picks it from a Secret's keys).
	Secret SecretFunc
	// Handle processes a workflow_job delivery.
	Handle Handler
	// MaxBodyBytes bounds a delivery (default 256 KiB). A workflow_job
	// delivery is tens of KiB (the job's steps and labels, the repository,
	// the sender), and GitHub itself caps payloads at 25 MB without ever
	// sending one near it for this event; 256 KiB leaves a job with a
	// long step list several times its size. Larger bodies get 413, told
	// by Content-Length before reading or cut off while reading.
	MaxBodyBytes int64
	// MaxInFlight bounds the requests being read, verified and recorded at
	// once (default 64), counted from before the body is read: one more is
	// answered 503 with Retry-After at once. Memory for unverified bodies
	// is at most MaxInFlight × MaxBodyBytes (16 MiB by default).
	MaxInFlight int
	// HandleTimeout bounds one Handler call (default 8 s).
	HandleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown: the server stops
	// accepting and the deliveries in flight finish (default 15 s).
	ShutdownTimeout time.Duration
	Log             logr.Logger

	once    sync.Once
	slots   chan struct{}
	seen    *recent
	handler http.Handler
}

func (r *Receiver) init() {
	r.once.Do(func() {
		if r.MaxBodyBytes <= 0 {
			r.MaxBodyBytes = DefaultMaxBodyBytes
		}
		if r.MaxInFlight <= 0 {
			r.MaxInFlight = 64
		}
		if r.HandleTimeout <= 0 {
			r.HandleTimeout = 8 * time.Second
		}
		if r.ShutdownTimeout <= 0 {
			r.ShutdownTimeout = 15 * time.Second
		}
		r.slots = make(chan struct{}, r.MaxInFlight)
		r.seen = newRecent(100000, 24*time.Hour)
		mux := http.NewServeMux()
		mux.HandleFunc(Path, r.serve)
		r.handler = mux
	})
}

// ServeHTTP lets tests and other servers mount the receiver.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.init()
	r.handler.ServeHTTP(w, req)
}

// NeedLeaderElection is false: every replica receives and records
// deliveries, so the webhook Service may spread over all of them and no
// delivery reaches a replica that refuses it, even in a failover (the
// leader only reads the records).
func (r *Receiver) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then shuts down gracefully: it stops
// accepting, and the deliveries in flight are recorded and answered.
func (r *Receiver) Start(ctx context.Context) error {
	r.init()
	if r.Addr == "" || r.Addr == "0" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", r.Addr)
	if err != nil {
		return fmt.Errorf("webhook receiver: listening on %s: %w", r.Addr, err)
	}
	srv := &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	drained := make(chan struct{})
	go func() { //nolint:gosec // the shutdown outlives ctx by design: it starts when ctx ends
		defer close(drained)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), r.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			r.Log.Error(err, "Deliveries still in flight at the end of the graceful shutdown; GitHub shows them failed")
		}
	}()
	r.Log.Info("Receiving GitHub webhook deliveries", "address", ln.Addr().String(), "path", Path)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// Serve returns as soon as Shutdown closes the listener; the records in
	// flight are still being made, and the manager must not stop the
	// caches and clients under them.
	<-drained
	return nil
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	event := gogithub.WebHookType(req)
	label := event
	switch event {
	case "workflow_job", "ping":
	default:
		label = "other" // bounded label values, whatever a sender writes
	}
	answer := func(code int, result, msg string) {
		deliveries.WithLabelValues(label, result).Inc()
		http.Error(w, msg, code)
	}
	if req.Method != http.MethodPost {
		answer(http.StatusMethodNotAllowed, ResultBadRequest, "POST only")
		return
	}
	// The slot is taken before a byte of the body is read or a secret
	// looked up: an unverified request costs at most MaxInFlight bodies of
	// MaxBodyBytes, and one more is refused at once rather than queued.
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		answer(http.StatusServiceUnavailable, ResultQueueFull, "busy, redeliver later")
		return
	}
	if req.ContentLength > r.MaxBodyBytes {
		answer(http.StatusRequestEntityTooLarge, ResultTooLarge, "delivery too large")
		return
	}
	mt, err := mediaType(req.Header.Get("Content-Type"))
	if err != nil {
		answer(http.StatusUnsupportedMediaType, ResultBadRequest, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			answer(http.StatusRequestEntityTooLarge, ResultTooLarge, "delivery too large")
			return
		}
		answer(http.StatusBadRequest, ResultBadRequest, "unreadable body")
		return
	}
	// Which secret must verify the delivery depends on whom it claims to
	// come from; the claim is read from the unverified body only to choose
	// the secret, and the verified payload is held to the same scope.
	scope, err := scopeOf(unverifiedPayload(mt, body))
	if err != nil {
		answer(http.StatusUnauthorized, ResultUnauthorized, "bad signature")
		return
	}
	secret, err := r.Secret(req.Context(), scope)
	switch {
	case errors.Is(err, ErrNoSecret):
		answer(http.StatusUnauthorized, ResultUnauthorized, "bad signature")
		return
	case err != nil:
		r.Log.Error(err, "No webhook secret to verify a delivery with")
		answer(http.StatusServiceUnavailable, ResultError, "webhook secret unavailable")
		return
	}
	// SHA-256 only: go-github would also take a SHA-1 signature.
	sig := req.Header.Get(gogithub.SHA256SignatureHeader)
	if len(secret) == 0 || !strings.HasPrefix(sig, "sha256=") {
		answer(http.StatusUnauthorized, ResultUnauthorized, "bad signature")
		return
	}
	payload, err := gogithub.ValidatePayloadFromBody(mt, bytes.NewReader(body), sig, secret)
	if err != nil {
		answer(http.StatusUnauthorized, ResultUnauthorized, "bad signature")
		return
	}
	if again, err := scopeOf(payload); err != nil || again != scope {
		answer(http.StatusUnauthorized, ResultUnauthorized, "bad signature")
		return
	}
	delivery := gogithub.DeliveryID(req)
	switch event {
	case "ping":
		answer(http.StatusOK, ResultAccepted, "pong")
		return
	case "workflow_job":
	default:
		answer(http.StatusAccepted, ResultIgnored, "event ignored")
		return
	}
	parsed, err := gogithub.ParseWebHook(event, payload)
	wj, ok := parsed.(*gogithub.WorkflowJobEvent)
	if err != nil || !ok {
		answer(http.StatusBadRequest, ResultBadRequest, "workflow_job payload is not JSON")
		return
	}
	job, err := toJobEvent(wj)
	if err != nil {
		answer(http.StatusBadRequest, ResultBadRequest, err.Error())
		return
	}
	job.Delivery = delivery
	if delivery != "" && !r.seen.add(delivery) {
		answer(http.StatusOK, ResultDuplicate, "duplicate delivery")
		return
	}
	// The record is made even if GitHub hangs up first (it then shows a
	// timeout and may redeliver, which the handler deduplicates) and even
	// while the process shuts down: the graceful shutdown waits for it.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), r.HandleTimeout)
	defer cancel()
	if err := r.Handle(hctx, job); err != nil {
		r.seen.forget(delivery)
		r.Log.Error(err, "Recording a workflow_job delivery failed; answered 503 so it can be redelivered",
			"delivery", delivery, "job", job.ID, "action", string(job.Action))
		answer(http.StatusServiceUnavailable, ResultError, "not recorded, redeliver later")
		return
	}
	answer(http.StatusAccepted, ResultAccepted, "accepted")
}

// recent remembers delivery IDs for a while, bounded in count, so a
// redelivery is recognised without unbounded memory.
type recent struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	at    map[string]time.Time
	order []string
}

func newRecent(maxEntries int, ttl time.Duration) *recent {
	return &recent{max: maxEntries, ttl: ttl, at: map[string]time.Time{}}
}

// add records id and reports whether it was new.
func (s *recent) add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if t, ok := s.at[id]; ok && now.Sub(t) < s.ttl {
		return false
	}
	s.at[id] = now
	s.order = append(s.order, id)
	for len(s.order) > s.max {
		delete(s.at, s.order[0])
		s.order = s.order[1:]
	}
	return true
}

func (s *recent) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.at, id)
}
