package scalesetlistener_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
	"github.com/hyperfleet/hyperfleet/reconcilers/scalesetlistener"
)

const pat = "ghp_hyperfleetlistenertests00000000000001"

var pool = types.NamespacedName{Namespace: "team-a", Name: "linux"}

// lab is githubsim with one scale set, and running Listeners.
type lab struct {
	srv   *githubsim.Server
	c     scaleset.Sessions
	id    int
	l     *scalesetlistener.Listeners
	mu    sync.Mutex
	woken int
}

func newLab(t *testing.T) *lab {
	t.Helper()
	srv := githubsim.New(githubsim.Options{Repositories: []string{"acme/widgets"}, PersonalAccessTokens: []string{pat}, MessagePollWait: 200 * time.Millisecond})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := scaleset.NewClient(scaleset.ClientConfig{Credentials: github.Config{Token: pat}, ConfigURL: srv.URL() + "acme/widgets", Version: "test", RetryMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	set, _, err := scaleset.Ensure(context.Background(), c, scaleset.Want{Name: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	lb := &lab{srv: srv, c: c, id: set.ID}
	lb.l = &scalesetlistener.Listeners{Owner: "test", Retry: 100 * time.Millisecond,
		Wake: func(types.NamespacedName) { lb.mu.Lock(); lb.woken++; lb.mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lb.l.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the listeners ended with %v", err)
		}
	})
	eventually.That(t, 10*time.Second, func() (bool, string) {
		err := lb.l.Ensure(pool, lb.id, c, 10)
		return err == nil, fmt.Sprint(err)
	})
	return lb
}

// demand waits until the pool's listener holds its session and states want.
func (lb *lab) demand(t *testing.T, want int) {
	t.Helper()
	eventually.That(t, 20*time.Second, func() (bool, string) {
		v, ok := lb.l.Demand(pool)
		return ok && v.Known && v.Assigned == want && v.Session == scaleset.SessionOpen, fmt.Sprintf("%+v (listening %v), want %d assigned", v, ok, want)
	})
}

func (lb *lab) queue(t *testing.T, n int) []int64 {
	t.Helper()
	var ids []int64
	for range n {
		id, err := lb.srv.QueueJob("acme/widgets", []string{"linux"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// The demand is GitHub's statistics, never a count of messages: with the
// JobCompleted messages of two cancelled jobs lost, a listener that counted
// messages would still want three runners and one more for the next job;
// the statistics say two.
func TestStatisticsWinOverLostMessages(t *testing.T) {
	lb := newLab(t)
	lb.demand(t, 0)
	ids := lb.queue(t, 3)
	lb.demand(t, 3)
	// The session is closed while the jobs end, so their messages wait in
	// the queue, and are lost there.
	lb.l.Stop(pool)
	for _, id := range ids[:2] {
		if err := lb.srv.CancelJob(id); err != nil {
			t.Fatal(err)
		}
	}
	if n := lb.srv.DropScaleSetMessages("linux"); n < 2 {
		t.Fatalf("%d messages dropped; the two JobCompleted messages should have been", n)
	}
	if err := lb.l.Ensure(pool, lb.id, lb.c, 10); err != nil {
		t.Fatal(err)
	}
	lb.queue(t, 1)
	lb.demand(t, 2)
	time.Sleep(time.Second) // nothing later changes it
	if v, _ := lb.l.Demand(pool); v.Assigned != 2 {
		t.Errorf("demand %d after the statistics said 2", v.Assigned)
	}
}

// A network that drops the session's polls (the connection reset, no
// answer) loses the session; the listener opens a new one, and the demand
// GitHub states is the same as before.
func TestDroppedConnectionsReopenTheSession(t *testing.T) {
	lb := newLab(t)
	lb.demand(t, 0)
	lb.queue(t, 2)
	lb.demand(t, 2)
	sessions := lb.srv.Calls(githubsim.EndpointSessionCreate)
	if err := lb.srv.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointMessageGet, Action: githubsim.FaultDrop, Times: 3}); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		n := lb.srv.Calls(githubsim.EndpointSessionCreate)
		return n > sessions && lb.srv.PendingFaults() == 0, fmt.Sprintf("%d sessions created, %d before; %d faults left", n, sessions, lb.srv.PendingFaults())
	})
	lb.queue(t, 1)
	lb.demand(t, 3)
}

// A pool whose credentials changed gets a new client; its listener moves
// to it (a new session), rather than polling on with credentials that may
// be revoked.
func TestNewClientMovesTheListener(t *testing.T) {
	lb := newLab(t)
	lb.demand(t, 0)
	sessions := lb.srv.Calls(githubsim.EndpointSessionCreate)
	c2, err := scaleset.NewClient(scaleset.ClientConfig{Credentials: github.Config{Token: pat}, ConfigURL: lb.srv.URL() + "acme/widgets", Version: "test", RetryMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := lb.l.Ensure(pool, lb.id, c2, 10); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		n := lb.srv.Calls(githubsim.EndpointSessionCreate)
		return n > sessions, fmt.Sprintf("%d sessions created, %d before the new client", n, sessions)
	})
	lb.queue(t, 1)
	lb.demand(t, 1)
}

// Stop closes the session, so another listener (a new leader) gets it at
// once rather than after GitHub lets it lapse; the pool's demand is no
// longer reported.
func TestStopClosesTheSession(t *testing.T) {
	lb := newLab(t)
	lb.demand(t, 0)
	if ss := lb.srv.ScaleSets(); len(ss) != 1 || ss[0].Session != "test" {
		t.Fatalf("scale sets %+v: want the session held by test", ss)
	}
	lb.l.Stop(pool)
	if ss := lb.srv.ScaleSets(); ss[0].Session != "" {
		t.Errorf("the session is still held by %q after Stop", ss[0].Session)
	}
	if _, ok := lb.l.Demand(pool); ok {
		t.Error("a stopped listener still reports demand")
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.woken == 0 {
		t.Error("the pool was never woken when its session opened")
	}
}

// Ensure before Start says so rather than leaving the pool without a
// listener silently.
func TestEnsureBeforeStartIsRefused(t *testing.T) {
	var l scalesetlistener.Listeners
	if err := l.Ensure(pool, 1, nil, 1); !errors.Is(err, scalesetlistener.ErrNotStarted) {
		t.Errorf("Ensure before Start: %v, want ErrNotStarted", err)
	}
}
