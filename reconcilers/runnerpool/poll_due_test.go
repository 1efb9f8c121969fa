package runnerpool

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/joblist"
)

// jobLister counts its listings; each holds the one job, queued until
// startedAt and in progress from then on (by clk).
type jobLister struct {
	clk       *clocktesting.FakePassiveClock
	startedAt time.Time
	calls     atomic.Int64
}

func (l *jobLister) ActiveJobs(context.Context, github.Scope) ([]github.ListedJob, error) {
	l.calls.Add(1)
	status := "queued"
	if !l.clk.Now().Before(l.startedAt) {
		status = "in_progress"
	}
	return []github.ListedJob{{ID: 1, Status: status}}, nil
}

func (l *jobLister) Fingerprint() string { return "pat" }

// A job GitHub shows started stops counting within one poll interval, even
// when a pool's poll takes a listing another pool started almost an
// interval before: the next poll is due an interval after that listing
// started, not after the poll. Counted from the poll, the job counted
// queued for almost two intervals.
func TestStartedJobStopsCountingWithinOneInterval(t *testing.T) {
	const interval = time.Minute
	t0 := time.Unix(1_700_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(t0)
	jobs := &joblist.Cache{}
	jobs.Clock = clk
	l := &jobLister{clk: clk, startedAt: t0.Add(time.Second)}
	gscope := github.Scope{Owner: "acme", Repository: "widgets"}

	// Pool A polls at t0. Pool B last polled a second before, so its next
	// poll comes when A's listing is 59 s old, and takes it.
	if _, err := jobs.Get(t.Context(), l, gscope, interval, time.Time{}); err != nil {
		t.Fatal(err)
	}
	lastPoll, lastList := t0.Add(-time.Second), t0.Add(-time.Second)
	var seen github.ListedJob
	// B reconciles every second (the pool's clock is the listings' clock,
	// as in production) until the job has stopped counting for it.
	for now := t0.Add(time.Second); !now.After(l.startedAt.Add(interval)); now = now.Add(time.Second) {
		clk.SetTime(now)
		if pollDue(now, lastPoll, jobs.Now(), lastList, interval) > 0 {
			continue
		}
		snap, err := jobs.Get(t.Context(), l, gscope, interval, lastList)
		if err != nil {
			t.Fatal(err)
		}
		lastPoll, lastList, seen = now, snap.Started, snap.Jobs[0]
		if seen.Status == "in_progress" {
			break
		}
	}
	if seen.Status != "in_progress" {
		t.Fatalf("an interval after the job started, pool B's last poll (%s after t0) took a listing started %s after t0 showing it %s",
			lastPoll.Sub(t0), lastList.Sub(t0), seen.Status)
	}
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("%d listings, want 2: A's, shared by B, and one after the job started", n)
	}
}

// pollDue counts from the later of the two bounds it is given: an
// interval after the last poll by the pool's clock, and an interval after
// the listing that poll took started, by the listings' clock.
func TestPollDue(t *testing.T) {
	const interval = time.Minute
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name              string
		now, lastPoll     time.Time
		listNow, lastList time.Time
		want              time.Duration
	}{
		{"NeverPolled", t0, time.Time{}, t0, time.Time{}, -1},
		{"FreshListing", t0.Add(10 * time.Second), t0, t0.Add(10 * time.Second), t0, 50 * time.Second},
		{"SharedListingTakenLate", t0.Add(10 * time.Second), t0, t0.Add(10 * time.Second), t0.Add(-40 * time.Second), 10 * time.Second},
		{"SharedListingAnIntervalOld", t0.Add(20 * time.Second), t0, t0.Add(20 * time.Second), t0.Add(-40 * time.Second), 0},
		{"FakePoolClockAdvanced", t0.Add(2 * interval), t0, t0.Add(time.Second), t0, -interval},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := pollDue(c.now, c.lastPoll, c.listNow, c.lastList, interval)
			if (c.want < 0 && got > 0) || (c.want >= 0 && got != c.want) {
				t.Fatalf("pollDue = %s, want %s", got, c.want)
			}
		})
	}
}
