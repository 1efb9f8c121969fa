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
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// DefaultInterval is how old a snapshot an ordinary read accepts.
const DefaultInterval = 15 * time.Second

// callTimeout bounds one shared listing (every page): it runs detached from
// the caller that started it, so that caller giving up does not fail the
// others waiting on it.
const callTimeout = 2 * time.Minute

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
	// Clock times the listings; nil is the real clock. It measures how old
	// GitHub's answer is, so it is real time even where pools run on a
	// fake clock.
	Clock clock.PassiveClock

	mu      sync.Mutex
	entries map[key]*entry
}

type key struct{ credential, scope string }

// keyOf names a credential's listing of scope; GitHub's names ignore case.
func keyOf(fingerprint string, scope github.Scope) key {
	return key{credential: fingerprint, scope: strings.ToLower(scope.String())}
}

type entry struct {
	snap *Snapshot // the latest listing that succeeded
	call *call     // the listing in flight, if any
	used time.Time
}

// call is one listing in flight; done is closed when snap or err is set.
type call struct {
	started time.Time
	// dereg: the listing may spend the rate-limit reserve
	// (github.ForDeregistration), so a deregistration may wait on it.
	dereg bool
	done  chan struct{}
	snap  *Snapshot
	err   error
	// waiters counts the callers that joined it (tests look).
	waiters int
}

// Get returns a listing of scope no older than Interval, from the shared
// snapshot when it is recent enough, else from a listing shared with every
// caller asking meanwhile.
func (c *Cache) Get(ctx context.Context, l Lister, scope github.Scope) (Snapshot, error) {
	return c.get(ctx, l, scope, c.now().Add(-c.interval()))
}

// Fresh returns a listing of scope started after the call, shared with
// every caller waiting at the same time, for decisions an old listing would
// make wrong (a deleted pool's last look for its registrations). Mark ctx
// with github.ForDeregistration to let it spend the rate-limit reserve.
func (c *Cache) Fresh(ctx context.Context, l Lister, scope github.Scope) (Snapshot, error) {
	return c.get(ctx, l, scope, c.now())
}

func (c *Cache) get(ctx context.Context, l Lister, scope github.Scope, notBefore time.Time) (Snapshot, error) {
	k := keyOf(l.Fingerprint(), scope)
	dereg := github.IsForDeregistration(ctx)
	for {
		c.mu.Lock()
		e := c.entry(k)
		if e.snap != nil && !e.snap.Started.Before(notBefore) {
			snap := *e.snap
			c.mu.Unlock()
			return snap, nil
		}
		cl := e.call
		if cl == nil {
			cl = &call{started: c.now(), dereg: dereg, done: make(chan struct{})}
			e.call = cl
			go c.list(ctx, k, e, cl, l, scope)
		} else {
			cl.waiters++
		}
		c.mu.Unlock()

		// A listing started before notBefore, or one that may not spend
		// the reserve a deregistration needs, is waited out and not used:
		// the next round starts (or joins) one that fits.
		fits := !cl.started.Before(notBefore) && (cl.dereg || !dereg)
		select {
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		case <-cl.done:
		}
		if !fits {
			continue
		}
		if cl.err != nil {
			return Snapshot{}, cl.err
		}
		return *cl.snap, nil
	}
}

// list runs one shared listing and publishes it.
func (c *Cache) list(caller context.Context, k key, e *entry, cl *call, l Lister, scope github.Scope) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(caller), callTimeout)
	defer cancel()
	runners, err := l.ListRunners(ctx, scope)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		cl.snap = &Snapshot{Started: cl.started, Runners: runners}
		// Only a listing that started later replaces the snapshot, so a
		// slow listing never undoes what a newer one saw.
		if e.snap == nil || e.snap.Started.Before(cl.started) {
			e.snap = cl.snap
		}
	}
	cl.err = err
	if e.call == cl {
		e.call = nil
	}
	close(cl.done)
	c.prune(k)
}

// entry returns k's entry, made when missing. The caller holds c.mu.
func (c *Cache) entry(k key) *entry {
	if c.entries == nil {
		c.entries = map[key]*entry{}
	}
	e := c.entries[k]
	if e == nil {
		e = &entry{}
		c.entries[k] = e
	}
	e.used = c.now()
	return e
}

// prune drops the entries of credentials or scopes no pool has read for a
// while (a deleted pool, rotated credentials), but never keep: its listing
// just ended. The caller holds c.mu.
func (c *Cache) prune(keep key) {
	cutoff := c.now().Add(-max(10*c.interval(), 10*time.Minute))
	for k, e := range c.entries {
		if k != keep && e.call == nil && e.used.Before(cutoff) {
			delete(c.entries, k)
		}
	}
}

// Len reports how many credential and scope pairs have an entry.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func (c *Cache) interval() time.Duration {
	if c.Interval > 0 {
		return c.Interval
	}
	return DefaultInterval
}

func (c *Cache) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock.Now()
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
