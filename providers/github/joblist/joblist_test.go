package joblist_test

import (
	"context"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/listcachetest"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/joblist"
)

var scope = github.Scope{Owner: "acme", Repository: "widgets"}

// lister answers job listings through the shared fake: listing n holds
// one queued job whose ID is n.
type lister struct {
	*listcachetest.Lister[[]github.ListedJob]
}

func newLister(fp string) *lister {
	return &lister{listcachetest.New(fp, func(_ context.Context, n int64) ([]github.ListedJob, error) {
		return []github.ListedJob{{ID: n, Status: "queued"}}, nil
	})}
}

func (l *lister) ActiveJobs(ctx context.Context, _ github.Scope) ([]github.ListedJob, error) {
	return l.List(ctx)
}

func newCache() (*joblist.Cache, *clocktesting.FakePassiveClock) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	c := &joblist.Cache{}
	c.Clock = clk
	return c, clk
}

const interval = time.Minute

// Two pools of one scope polling within an interval of each other make one
// request; a listing older than a pool's interval is not used by it, while
// a pool with a longer interval still takes it.
func TestPoolsShareAListingYoungerThanTheirInterval(t *testing.T) {
	c, clk := newCache()
	l := newLister("pat")
	a, err := c.Get(t.Context(), l, scope, interval, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(interval - time.Second))
	b, err := c.Get(t.Context(), l, scope, interval, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Calls.Load(); n != 1 || b.Jobs[0].ID != 1 || !b.Started.Equal(a.Started) {
		t.Fatalf("second pool within the interval: %d listings, got listing %d; want the first, shared", n, b.Jobs[0].ID)
	}

	clk.SetTime(clk.Now().Add(2 * time.Second)) // the listing is now older than a minute
	long, err := c.Get(t.Context(), l, scope, 5*interval, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Calls.Load(); n != 1 || long.Jobs[0].ID != 1 {
		t.Fatalf("a pool polling every 5 min: %d listings, got listing %d; want the shared one", n, long.Jobs[0].ID)
	}
	stale, err := c.Get(t.Context(), l, scope, interval, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Calls.Load(); n != 2 || stale.Jobs[0].ID != 2 || !stale.Started.Equal(clk.Now()) {
		t.Fatalf("a pool polling every minute, the listing 61 s old: %d listings, got listing %d; want a new one", n, stale.Jobs[0].ID)
	}

	// Another credential, or another scope, lists on its own.
	if _, err := c.Get(t.Context(), newLister("app"), scope, interval, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(t.Context(), l, github.Scope{Organization: "acme"}, interval, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n, entries := l.Calls.Load(), c.Len(); n != 3 || entries != 3 {
		t.Fatalf("%d listings by pat and %d entries, want 3 and 3", n, entries)
	}
}

// A pool never takes the listing its last poll used, however young: each
// of its polls sees GitHub after the one before.
func TestAPollNeverTakesItsLastListingAgain(t *testing.T) {
	c, clk := newCache()
	l := newLister("pat")
	first, err := c.Get(t.Context(), l, scope, interval, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(time.Second))
	next, err := c.Get(t.Context(), l, scope, interval, first.Started)
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Calls.Load(); n != 2 || next.Jobs[0].ID != 2 || !next.Started.After(first.Started) {
		t.Fatalf("%d listings, got listing %d started %s; want a new one after %s", n, next.Jobs[0].ID, next.Started, first.Started)
	}
}

// Pools whose polls come due while a listing is in flight wait for it and
// share it: one request for all of them.
func TestConcurrentPollsShareOneListing(t *testing.T) {
	c, _ := newCache()
	l := newLister("pat")
	l.Gate = make(chan struct{})
	const pools = 10
	var wg sync.WaitGroup
	snaps := make(chan joblist.Snapshot, pools)
	for range pools {
		wg.Go(func() {
			snap, err := c.Get(t.Context(), l, scope, interval, time.Time{})
			if err != nil {
				t.Error(err)
			}
			snaps <- snap
		})
	}
	<-l.Entered
	eventually.True(t, 10*time.Second, "every other poll waits on the listing in flight", func() bool {
		return c.Waiters("pat", scope) == pools-1
	})
	close(l.Gate)
	wg.Wait()
	close(snaps)
	for snap := range snaps {
		if len(snap.Jobs) != 1 || snap.Jobs[0].ID != 1 {
			t.Fatalf("a poll got %+v, want the one listing", snap)
		}
	}
	if n := l.Calls.Load(); n != 1 {
		t.Fatalf("%d listings for %d concurrent polls, want 1", n, pools)
	}
}

// A failed listing fails every poll that waited on it and is not kept: the
// next poll lists again.
func TestFailuresAreNotKept(t *testing.T) {
	c, _ := newCache()
	l := newLister("pat")
	l.Fail.Store(true)
	l.Gate = make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Get(t.Context(), l, scope, interval, time.Time{})
			errs <- err
		}()
	}
	<-l.Entered
	eventually.True(t, 10*time.Second, "the second poll waits on the listing in flight", func() bool {
		return c.Waiters("pat", scope) == 1
	})
	close(l.Gate)
	for range 2 {
		if err := <-errs; err == nil {
			t.Fatal("want the listing's error for both polls")
		}
	}
	l.Fail.Store(false)
	snap, err := c.Get(t.Context(), l, scope, interval, time.Time{})
	if err != nil {
		t.Fatalf("after a failure: %v", err)
	}
	if n := l.Calls.Load(); n != 2 || snap.Jobs[0].ID != 2 {
		t.Fatalf("%d listings, got listing %d; want a second listing after the failed one", n, snap.Jobs[0].ID)
	}
}
