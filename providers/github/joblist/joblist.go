// Package joblist holds the active-job listings RunnerPools share for the
// demand poll: one listing of a scope's unfinished runs and their jobs
// (github.Client.ActiveJobs) per credential at a time, however many pools
// poll that scope. Each pool polls on its own interval and takes the shared
// listing when it is recent enough for that interval, else starts one that
// every pool asking meanwhile waits on (listcache). Which jobs a pool
// records stays the pool's own decision. Nothing here needs to survive a
// restart: a new process lists again on its first poll.
package joblist

import (
	"context"
	"time"

	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/listcache"
)

// Lister lists every job of a scope's unfinished runs; *github.Client is one.
type Lister interface {
	ActiveJobs(ctx context.Context, scope github.Scope) ([]github.ListedJob, error)
	// Fingerprint names the credential: listers with the same one share
	// listings.
	Fingerprint() string
}

// Snapshot is one listing. Jobs is shared by every reader: read it, do not
// modify it.
type Snapshot struct {
	// Started is when the listing's first request was made, by the Cache's
	// clock: a job that started or finished before then shows so in it.
	Started time.Time
	Jobs    []github.ListedJob
}

// Cache shares listings between the pools of one process. The zero value
// is ready to use; it is safe for concurrent use.
type Cache struct {
	// Cache holds the listings. Its Clock times them (nil: the real clock);
	// it measures how old GitHub's answer is, so it is real time even where
	// pools run on a fake clock.
	listcache.Cache[[]github.ListedJob]
}

// Get returns a listing of scope's active jobs that started at most maxAge
// ago and after previous (the Started of the listing the caller used last;
// zero for none): a pool never acts on a listing older than its poll
// interval, and never takes the same listing twice, so each of its polls
// sees GitHub after the one before. The shared snapshot is used when it
// fits, else a listing shared with every caller asking meanwhile. A failed
// listing is not kept: the next caller lists again.
func (c *Cache) Get(ctx context.Context, l Lister, scope github.Scope, maxAge time.Duration, previous time.Time) (Snapshot, error) {
	notBefore := c.Now().Add(-maxAge)
	if !previous.IsZero() && !previous.Before(notBefore) {
		notBefore = previous.Add(time.Nanosecond)
	}
	snap, err := c.Cache.Get(ctx, l.Fingerprint(), scope, notBefore, func(ctx context.Context) ([]github.ListedJob, error) {
		return l.ActiveJobs(ctx, scope)
	})
	return Snapshot{Started: snap.Started, Jobs: snap.Items}, err
}
