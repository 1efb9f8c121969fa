package githubsim_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

// gatedReceiver holds every delivery unanswered until released, counting
// how many are in flight at once.
type gatedReceiver struct {
	srv     *httptest.Server
	release chan struct{}

	mu                 sync.Mutex
	inFlight, maxSeen  int
	answered, received int
}

func newGatedReceiver(t *testing.T) *gatedReceiver {
	g := &gatedReceiver{release: make(chan struct{})}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.received++
		g.inFlight++
		g.maxSeen = max(g.maxSeen, g.inFlight)
		g.mu.Unlock()
		<-g.release
		g.mu.Lock()
		g.inFlight--
		g.answered++
		g.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	// Release before closing: Close waits for the held requests.
	t.Cleanup(func() { g.open(); g.srv.Close() })
	return g
}

func (g *gatedReceiver) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

func (g *gatedReceiver) counts() (inFlight, maxSeen, received, answered int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, g.maxSeen, g.received, g.answered
}

// With DeliveryConcurrency n, a burst of queued jobs reaches the receiver n
// deliveries at a time without waiting for an answer, as GitHub sends
// them: a receiver that answers none of them still sees n in flight, which
// a one-at-a-time sender would never show. The rest go once answers come.
func TestDeliveriesAreSentConcurrently(t *testing.T) {
	const workers, jobs = 8, 20
	g := newGatedReceiver(t)
	s := startSim(t, githubsim.Options{WebhookURL: g.srv.URL, DeliveryConcurrency: workers, JobDuration: time.Hour})
	for range jobs {
		if _, err := s.QueueJob("acme/widgets", []string{"self-hosted", "linux"}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		inFlight, _, _, _ := g.counts()
		return inFlight == workers, fmt.Sprintf("%d deliveries in flight, want %d", inFlight, workers)
	})
	g.open()
	eventually.That(t, 10*time.Second, func() (bool, string) {
		_, _, received, answered := g.counts()
		return answered == jobs, fmt.Sprintf("%d deliveries received, %d answered, want %d", received, answered, jobs)
	})
	if _, maxSeen, _, _ := g.counts(); maxSeen > workers {
		t.Fatalf("%d deliveries were in flight at once, more than DeliveryConcurrency %d", maxSeen, workers)
	}
	// The receiver counts an answer as it writes it; the simulator records
	// it once the response reaches its client, a moment later.
	eventually.That(t, 10*time.Second, func() (bool, string) {
		for _, d := range s.Deliveries() {
			if !d.Attempted {
				return false, fmt.Sprintf("delivery %d not recorded as attempted yet", d.ID)
			}
		}
		return true, ""
	})
	for _, d := range s.Deliveries() {
		if d.StatusCode != http.StatusAccepted || d.SentAt.IsZero() || d.DeliveredAt.Before(d.SentAt) {
			t.Fatalf("delivery %d: status %d, sent %s, delivered %s, error %q", d.ID, d.StatusCode, d.SentAt, d.DeliveredAt, d.Error)
		}
	}
}

// By default deliveries go one at a time: the receiver never has two.
func TestDeliveriesAreSerialByDefault(t *testing.T) {
	g := newGatedReceiver(t)
	s := startSim(t, githubsim.Options{WebhookURL: g.srv.URL, JobDuration: time.Hour})
	for range 3 {
		if _, err := s.QueueJob("acme/widgets", []string{"self-hosted", "linux"}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, 10*time.Second, "the first delivery received", func() bool {
		_, _, received, _ := g.counts()
		return received == 1
	})
	g.open()
	eventually.True(t, 10*time.Second, "three deliveries answered", func() bool {
		_, _, _, answered := g.counts()
		return answered == 3
	})
	if _, maxSeen, _, _ := g.counts(); maxSeen != 1 {
		t.Fatalf("%d deliveries were in flight at once by default, want 1", maxSeen)
	}
}
