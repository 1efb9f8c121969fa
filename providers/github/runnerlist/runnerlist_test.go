package runnerlist_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/listcachetest"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerlist"
)

var scope = github.Scope{Owner: "acme", Repository: "widgets"}

// lister answers runner listings through the shared fake; a listing
// without github.ForDeregistration fails when spent is set.
type lister struct {
	*listcachetest.Lister[[]github.Runner]
	spent atomic.Bool
}

func newLister(fp string) *lister {
	l := &lister{}
	l.Lister = listcachetest.New(fp, func(ctx context.Context, n int64) ([]github.Runner, error) {
		if l.spent.Load() && !github.IsForDeregistration(ctx) {
			return nil, errors.New("refused")
		}
		return []github.Runner{
			{ID: n, Name: "a", Labels: []string{"self-hosted", "Pool-A"}},
			{ID: 100 + n, Name: "b", Labels: []string{"self-hosted", "pool-b"}},
		}, nil
	})
	return l
}

func (l *lister) ListRunners(ctx context.Context, _ github.Scope) ([]github.Runner, error) {
	return l.List(ctx)
}

func newCache() (*runnerlist.Cache, *clocktesting.FakePassiveClock) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	c := &runnerlist.Cache{Interval: 10 * time.Second}
	c.Clock = clk
	return c, clk
}

// Many pools reading at once, and again within the interval, cause one
// listing; the next interval's first read causes the next.
func TestOneListingPerInterval(t *testing.T) {
	c, clk := newCache()
	l := newLister("pat")
	l.Gate = make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			if _, err := c.Get(t.Context(), l, scope); err != nil {
				errs <- err
			}
		})
	}
	<-l.Entered
	close(l.Gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for range 5 {
		clk.SetTime(clk.Now().Add(time.Second))
		if _, err := c.Get(t.Context(), l, scope); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.Calls.Load(); n != 1 {
		t.Fatalf("%d listings for 25 reads within one interval, want 1", n)
	}
	clk.SetTime(clk.Now().Add(10 * time.Second))
	snap, err := c.Get(t.Context(), l, scope)
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Calls.Load(); n != 2 || snap.Runners[0].ID != 2 || !snap.Started.Equal(clk.Now()) {
		t.Fatalf("after the interval: %d listings, snapshot %+v; want a second listing", n, snap)
	}
	// Another credential, or another scope, has listings of its own.
	if _, err := c.Get(t.Context(), newLister("app"), scope); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(t.Context(), l, github.Scope{Organization: "acme"}); err != nil {
		t.Fatal(err)
	}
	if got := c.Len(); got != 3 {
		t.Fatalf("%d entries, want 3", got)
	}
}

// Fresh never returns a listing that started before the call: callers that
// come while an older listing is in flight wait it out and share the next.
func TestFreshListingsAreCoalesced(t *testing.T) {
	c, clk := newCache()
	l := newLister("pat")
	l.Gate = make(chan struct{})
	first := make(chan runnerlist.Snapshot, 1)
	go func() {
		snap, _ := c.Get(t.Context(), l, scope)
		first <- snap
	}()
	<-l.Entered
	clk.SetTime(clk.Now().Add(time.Second))
	asked := clk.Now()
	var wg sync.WaitGroup
	snaps := make(chan runnerlist.Snapshot, 10)
	for range 10 {
		wg.Go(func() {
			snap, err := c.Fresh(t.Context(), l, scope)
			if err != nil {
				t.Error(err)
			}
			snaps <- snap
		})
	}
	eventually.True(t, 10*time.Second, "the fresh reads wait on the listing in flight", func() bool {
		return c.Waiters("pat", scope) == 10
	})
	close(l.Gate)
	wg.Wait()
	close(snaps)
	if snap := <-first; snap.Runners[0].ID != 1 {
		t.Fatalf("the ordinary read got %+v, want the first listing", snap)
	}
	for snap := range snaps {
		if snap.Started.Before(asked) || snap.Runners[0].ID != 2 {
			t.Fatalf("a fresh read got a listing started %s (runner %d), before it asked (%s)", snap.Started, snap.Runners[0].ID, asked)
		}
	}
	if n := l.Calls.Load(); n != 2 {
		t.Fatalf("%d listings, want 2: the one in flight and one shared by the 10 fresh reads", n)
	}
}

// A failed listing is not kept: the next read lists again.
func TestFailuresAreNotKept(t *testing.T) {
	c, _ := newCache()
	l := newLister("pat")
	l.Fail.Store(true)
	if _, err := c.Get(t.Context(), l, scope); err == nil {
		t.Fatal("want the listing's error")
	}
	l.Fail.Store(false)
	if _, err := c.Get(t.Context(), l, scope); err != nil {
		t.Fatalf("after a failure: %v", err)
	}
	if n := l.Calls.Load(); n != 2 {
		t.Fatalf("%d listings, want 2", n)
	}
}

// With only the reserve left, an ordinary listing fails, and a
// deregistration's fresh listing (which may spend the reserve) does not
// take that failure as its own.
func TestDeregistrationDoesNotShareAnOrdinaryFailure(t *testing.T) {
	c, _ := newCache()
	l := newLister("pat")
	l.spent.Store(true)
	l.Gate = make(chan struct{})
	ordinary := make(chan error, 1)
	go func() {
		_, err := c.Get(t.Context(), l, scope)
		ordinary <- err
	}()
	<-l.Entered
	done := make(chan error, 1)
	go func() {
		_, err := c.Fresh(github.ForDeregistration(t.Context()), l, scope)
		done <- err
	}()
	eventually.True(t, 10*time.Second, "the deregistration waits on the ordinary listing", func() bool {
		return c.Waiters("pat", scope) == 1
	})
	close(l.Gate)
	if err := <-ordinary; err == nil {
		t.Fatal("the ordinary listing must fail with only the reserve left")
	}
	if err := <-done; err != nil {
		t.Fatalf("the deregistration's listing: %v", err)
	}
}

// A caller that gives up does not fail the others waiting on its listing.
func TestCallerCancellationDoesNotFailOthers(t *testing.T) {
	c, _ := newCache()
	l := newLister("pat")
	l.Gate = make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, l, scope)
		gaveUp <- err
	}()
	<-l.Entered
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v", err)
	}
	other := make(chan error, 1)
	go func() {
		_, err := c.Get(t.Context(), l, scope)
		other <- err
	}()
	close(l.Gate)
	if err := <-other; err != nil {
		t.Fatalf("another caller: %v", err)
	}
	if n := l.Calls.Load(); n != 1 {
		t.Fatalf("%d listings, want 1", n)
	}
}

func TestLabelled(t *testing.T) {
	runners := []github.Runner{
		{ID: 1, Labels: []string{"self-hosted", "Pool-A"}},
		{ID: 2, Labels: []string{"pool-b"}},
		{ID: 3, Labels: []string{"pool-a", "POOL-A"}},
	}
	got := runnerlist.Labelled(runners, "pool-a")
	if len(got) != 2 || got[0].ID != 1 || got[1].ID != 3 {
		t.Fatalf("Labelled = %+v, want runners 1 and 3", got)
	}
}
