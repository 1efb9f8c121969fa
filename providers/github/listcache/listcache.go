// Package listcache shares GitHub listings between the RunnerPools of one
// process: one listing of a scope per credential at a time, however many
// pools read it. A caller names the oldest start it accepts; a snapshot
// started since is shared, else one listing is made and every caller
// asking meanwhile waits on it. A failed listing is returned to those
// waiting and never kept. providers/github/runnerlist (registered runners)
// and providers/github/joblist (active jobs) are its two uses. Nothing here
// needs to survive a restart: a new process lists again on its first read.
package listcache

import (
	"context"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// callTimeout bounds one shared listing (every page): it runs detached from
// the caller that started it, so that caller giving up does not fail the
// others waiting on it.
const callTimeout = 2 * time.Minute

// minKeep is how long an entry nobody reads is kept at least.
const minKeep = 10 * time.Minute

// Snapshot is one listing. Items is shared by every reader: read it, do not
// modify it.
type Snapshot[T any] struct {
	// Started is when the listing's first request was made, by the Cache's
	// clock: everything GitHub had before then is in it as it was then or later.
	Started time.Time
	Items   T
}

// Cache shares listings of type T. The zero value is ready to use; it is
// safe for concurrent use.
type Cache[T any] struct {
	// Clock times the listings; nil is the real clock. It measures how old
	// GitHub's answer is, so it is real time even where pools run on a
	// fake clock.
	Clock clock.PassiveClock

	mu      sync.Mutex
	entries map[key]*entry[T]
}

type key struct{ credential, scope string }

// keyOf names a credential's listing of scope; GitHub's names ignore case.
func keyOf(credential string, scope github.Scope) key {
	return key{credential: credential, scope: strings.ToLower(scope.String())}
}

type entry[T any] struct {
	snap *Snapshot[T] // the latest listing that succeeded
	call *call[T]     // the listing in flight, if any
	used time.Time
}

// call is one listing in flight; done is closed when snap or err is set.
type call[T any] struct {
	started time.Time
	// dereg: the listing may spend the rate-limit reserve
	// (github.ForDeregistration), so a deregistration may wait on it.
	dereg bool
	done  chan struct{}
	snap  *Snapshot[T]
	err   error
	// waiters counts the callers that joined it (tests look).
	waiters int
}

// Get returns a listing of scope on credential that started at or after
// notBefore: the shared snapshot when it did, else one made by list and
// shared with every caller asking meanwhile. A listing in flight that
// started too early, or that may not spend the rate-limit reserve a caller
// marked with github.ForDeregistration needs, is waited out and not used.
func (c *Cache[T]) Get(ctx context.Context, credential string, scope github.Scope, notBefore time.Time,
	list func(context.Context) (T, error)) (Snapshot[T], error) {
	k := keyOf(credential, scope)
	dereg := github.IsForDeregistration(ctx)
	// An entry is kept ten times as long as its readers' oldest accepted
	// snapshot, at least minKeep, after its last read.
	keep := max(10*c.Now().Sub(notBefore), minKeep)
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
			cl = &call[T]{started: c.Now(), dereg: dereg, done: make(chan struct{})}
			e.call = cl
			go c.list(ctx, k, e, cl, list, keep)
		} else {
			cl.waiters++
		}
		c.mu.Unlock()

		// The next round starts (or joins) a listing that fits.
		fits := !cl.started.Before(notBefore) && (cl.dereg || !dereg)
		select {
		case <-ctx.Done():
			return Snapshot[T]{}, ctx.Err()
		case <-cl.done:
		}
		if !fits {
			continue
		}
		if cl.err != nil {
			return Snapshot[T]{}, cl.err
		}
		return *cl.snap, nil
	}
}

// list runs one shared listing and publishes it.
func (c *Cache[T]) list(caller context.Context, k key, e *entry[T], cl *call[T], list func(context.Context) (T, error), keep time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(caller), callTimeout)
	defer cancel()
	items, err := list(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		cl.snap = &Snapshot[T]{Started: cl.started, Items: items}
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
	c.prune(k, keep)
}

// entry returns k's entry, made when missing. The caller holds c.mu.
func (c *Cache[T]) entry(k key) *entry[T] {
	if c.entries == nil {
		c.entries = map[key]*entry[T]{}
	}
	e := c.entries[k]
	if e == nil {
		e = &entry[T]{}
		c.entries[k] = e
	}
	e.used = c.Now()
	return e
}

// prune drops the entries of credentials or scopes no pool has read for
// keep (a deleted pool, rotated credentials), but never k: its listing just
// ended. The caller holds c.mu.
func (c *Cache[T]) prune(k key, keep time.Duration) {
	cutoff := c.Now().Add(-keep)
	for other, e := range c.entries {
		if other != k && e.call == nil && e.used.Before(cutoff) {
			delete(c.entries, other)
		}
	}
}

// Len reports how many credential and scope pairs have an entry.
func (c *Cache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Waiters is how many callers joined the listing of scope on credential in
// flight (0 when none is); tests use it to know a caller is waiting.
func (c *Cache[T]) Waiters(credential string, scope github.Scope) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[keyOf(credential, scope)]
	if e == nil || e.call == nil {
		return 0
	}
	return e.call.waiters
}

// Now is the time by the Cache's clock.
func (c *Cache[T]) Now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock.Now()
}
