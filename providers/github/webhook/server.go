// Package webhook receives GitHub's webhook deliveries for the RunnerPool
// autoscaler: POST /github/webhook, signature checked against the secret,
// answered at once, and the work done from a queue, once per delivery. A
// workflow_job delivery reaches the Handler as a github.JobEvent, the
// provider's demand type, so the autoscaler that consumes it depends on the
// provider and not on this receiver.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// Path is where GitHub posts deliveries.
const Path = "/github/webhook"

// Results of a delivery, the result label of hyperfleet_webhook_deliveries_total.
const (
	ResultAccepted     = "accepted"
	ResultDuplicate    = "duplicate"
	ResultIgnored      = "ignored"
	ResultUnauthorized = "unauthorized"
	ResultBadRequest   = "bad_request"
	ResultTooLarge     = "too_large"
	ResultQueueFull    = "queue_full"
	ResultError        = "error"
)

var (
	deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_webhook_deliveries_total",
		Help: "GitHub webhook deliveries received, by event and result (accepted, duplicate, ignored, unauthorized, bad_request, too_large, queue_full, error).",
	}, []string{"event", "result"})
)

// Registered when the package is linked, so the series exists on every
// replica, leader or not, from the start.
func init() { metrics.Registry.MustRegister(deliveries) }

// SecretFunc returns the current webhook secret, so a rotated secret takes
// effect without a restart. It must not be logged.
type SecretFunc func(ctx context.Context) ([]byte, error)

// Handler does the work of one accepted workflow_job delivery. It runs on
// the receiver's worker, never on the HTTP request.
type Handler func(ctx context.Context, job github.JobEvent) error

// Receiver is the webhook HTTP server, a manager Runnable.
type Receiver struct {
	// Addr to listen on, e.g. ":9443"; "0" or empty disables the receiver.
	Addr string
	// Secret returns the shared secret GitHub signs deliveries with.
	Secret SecretFunc
	// Handle processes a workflow_job delivery.
	Handle Handler
	// MaxBodyBytes bounds a delivery (default 1 MiB; workflow_job payloads
	// are a few KiB). Larger bodies get 413.
	MaxBodyBytes int64
	// QueueSize bounds deliveries waiting for the worker (default 10000).
	QueueSize int
	Log       logr.Logger

	once    sync.Once
	queue   chan github.JobEvent
	seen    *recent
	handler http.Handler
}

func (r *Receiver) init() {
	r.once.Do(func() {
		if r.MaxBodyBytes <= 0 {
			r.MaxBodyBytes = 1 << 20
		}
		if r.QueueSize <= 0 {
			r.QueueSize = 10000
		}
		r.queue = make(chan github.JobEvent, r.QueueSize)
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

// NeedLeaderElection: only the leader scales pools, so only it listens.
// The webhook Service selects every ready replica, so with two replicas some
// deliveries reach a follower and fail; GitHub shows them as failed, and the
// pools' polling fallback makes up for them (see docs/install.md).
func (r *Receiver) NeedLeaderElection() bool { return true }

// Start serves until ctx ends and runs the worker that handles deliveries.
func (r *Receiver) Start(ctx context.Context) error {
	r.init()
	go r.work(ctx)
	if r.Addr == "" || r.Addr == "0" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", r.Addr)
	if err != nil {
		return fmt.Errorf("webhook receiver: listening on %s: %w", r.Addr, err)
	}
	srv := &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	go func() { //nolint:gosec // the shutdown outlives ctx by design: it starts when ctx ends
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	r.Log.Info("Receiving GitHub webhook deliveries", "address", ln.Addr().String(), "path", Path)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	event := req.Header.Get("X-GitHub-Event")
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
	secret, err := r.Secret(req.Context())
	if err != nil {
		r.Log.Error(err, "No webhook secret to verify a delivery with")
		answer(http.StatusServiceUnavailable, ResultError, "webhook secret unavailable")
		return
	}
	if err := VerifySignature(secret, body, req.Header.Get("X-Hub-Signature-256")); err != nil {
		answer(http.StatusUnauthorized, ResultUnauthorized, "bad signature")
		return
	}
	delivery := req.Header.Get("X-GitHub-Delivery")
	switch event {
	case "ping":
		answer(http.StatusOK, ResultAccepted, "pong")
		return
	case "workflow_job":
	default:
		answer(http.StatusAccepted, ResultIgnored, "event ignored")
		return
	}
	job, err := ParseWorkflowJob(body)
	if err != nil {
		answer(http.StatusBadRequest, ResultBadRequest, err.Error())
		return
	}
	job.Delivery = delivery
	if delivery != "" && !r.seen.add(delivery) {
		answer(http.StatusOK, ResultDuplicate, "duplicate delivery")
		return
	}
	select {
	case r.queue <- job:
		answer(http.StatusAccepted, ResultAccepted, "accepted")
	default:
		r.seen.forget(delivery) // let a redelivery try again
		answer(http.StatusServiceUnavailable, ResultQueueFull, "busy, redeliver later")
	}
}

func (r *Receiver) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case job := <-r.queue:
			if err := r.Handle(ctx, job); err != nil {
				r.Log.Error(err, "Handling a workflow_job delivery failed", "delivery", job.Delivery, "job", job.ID, "action", string(job.Action))
			}
		}
	}
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
