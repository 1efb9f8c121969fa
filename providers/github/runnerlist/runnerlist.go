// Package runnerlist holds the runner listings RunnerPools share: one
// listing of a scope's registered runners per credential and interval,
// however many pools use that credential and scope and however often they
// reconcile. A pool reads the latest snapshot (and filters it to its own
// runners, Labelled); one that must not act on old data asks for a listing
// started after its call (Fresh), which it shares with every caller waiting
// at the same time. Nothing here needs to survive a restart: a new process
// lists again on its first read.
package runnerlist

import (
	"context"
	"strings"
	"time"

	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/listcache"
)

// DefaultInterval is how old a snapshot an ordinary read accepts.
const DefaultInterval = 15 * time.Second

// Lister lists a scope's runners, every page; *github.Client is one.
type Lister interface {
	ListRunners(ctx context.Context, scope github.Scope) ([]github.Runner, error)
	// Fingerprint names the credential: listers with the same one share
	// listings.
	Fingerprint() string
}

// Snapshot is one listing. Runners is shared by every reader: read it, do
// not modify it.
type Snapshot struct {
	// Started is when the listing's first request was made, by the Cache's
	// clock: every runner registered before then is in it.
	Started time.Time
	Runners []github.Runner
}

// Cache shares listings between the pools of one process. The zero value
// is ready to use; it is safe for concurrent use.
type Cache struct {
	// Interval is the oldest snapshot an ordinary read (Get) accepts;
	// 0 means DefaultInterval.
	Interval time.Duration
	// Cache holds the listings. Its Clock times them (nil: the real clock);
	// it measures how old GitHub's answer is, so it is real time even where
	// pools run on a fake clock.
	listcache.Cache[[]github.Runner]
}

// Get returns a listing of scope no older than Interval, from the shared
// snapshot when it is recent enough, else from a listing shared with every
// caller asking meanwhile.
func (c *Cache) Get(ctx context.Context, l Lister, scope github.Scope) (Snapshot, error) {
	return c.get(ctx, l, scope, c.Now().Add(-c.interval()))
}

// Fresh returns a listing of scope started after the call, shared with
// every caller waiting at the same time, for decisions an old listing would
// make wrong (a deleted pool's last look for its registrations). Mark ctx
// with github.ForDeregistration to let it spend the rate-limit reserve.
func (c *Cache) Fresh(ctx context.Context, l Lister, scope github.Scope) (Snapshot, error) {
	return c.get(ctx, l, scope, c.Now())
}

func (c *Cache) get(ctx context.Context, l Lister, scope github.Scope, notBefore time.Time) (Snapshot, error) {
	snap, err := c.Cache.Get(ctx, l.Fingerprint(), scope, notBefore, func(ctx context.Context) ([]github.Runner, error) {
		return l.ListRunners(ctx, scope)
	})
	return Snapshot{Started: snap.Started, Runners: snap.Items}, err
}

func (c *Cache) interval() time.Duration {
	if c.Interval > 0 {
		return c.Interval
	}
	return DefaultInterval
}

// Labelled returns the runners carrying label (ignoring case, as GitHub
// does): a pool's own among everything registered in its scope.
func Labelled(runners []github.Runner, label string) []github.Runner {
	var out []github.Runner
	for _, rn := range runners {
		for _, l := range rn.Labels {
			if strings.EqualFold(l, label) {
				out = append(out, rn)
				break
			}
		}
	}
	return out
}
