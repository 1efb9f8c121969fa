package runnerpool

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// jobState is how far a job has come; it only moves forward, so a late or
// redelivered "queued" never counts a job that a runner already took.
type jobState int

const (
	jobQueued jobState = iota + 1
	jobTaken
	jobDone
)

type jobRecord struct {
	pool     types.NamespacedName
	state    jobState
	queuedAt time.Time
	seen     time.Time
}

// Demand remembers the jobs webhooks announced, per pool: how many wait
// for a runner. One record per job ID makes scaling idempotent: a
// redelivery, or the same job reported twice, scales once.
type Demand struct {
	mu   sync.Mutex
	jobs map[int64]*jobRecord
	// Forget records this long after their last change (6 h: longer than
	// GitHub keeps a job queued, 24 h, would hold memory for nothing useful
	// once the pool's own listing disagrees).
	retention time.Duration
}

// NewDemand returns an empty store.
func NewDemand() *Demand {
	return &Demand{jobs: map[int64]*jobRecord{}, retention: 6 * time.Hour}
}

// Record applies a job event for pool and reports whether the pool's
// demand changed, and, for a job a runner just took, how long it waited.
func (d *Demand) Record(pool types.NamespacedName, job github.JobEvent, now time.Time) (changed bool, waited time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire(now)
	next := map[github.JobAction]jobState{
		github.JobQueued: jobQueued, github.JobWaiting: jobQueued,
		github.JobInProgress: jobTaken, github.JobCompleted: jobDone,
	}[job.Action]
	if next == 0 {
		return false, 0
	}
	r, ok := d.jobs[job.ID]
	if !ok {
		r = &jobRecord{pool: pool, queuedAt: now}
		d.jobs[job.ID] = r
	}
	if r.state >= next {
		return false, 0 // a redelivery, or news older than what we know
	}
	if next == jobTaken && r.state == jobQueued {
		waited = now.Sub(r.queuedAt)
	}
	r.state, r.seen = next, now
	return true, waited
}

// Queued is the number of jobs waiting for a runner of pool.
func (d *Demand) Queued(pool types.NamespacedName) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, r := range d.jobs {
		if r.pool == pool && r.state == jobQueued {
			n++
		}
	}
	return n
}

// Forget drops a deleted pool's records.
func (d *Demand) Forget(pool types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, r := range d.jobs {
		if r.pool == pool {
			delete(d.jobs, id)
		}
	}
}

// expire drops finished and stale records; called with d.mu held.
func (d *Demand) expire(now time.Time) {
	for id, r := range d.jobs {
		if now.Sub(r.seen) > d.retention && !r.seen.IsZero() {
			delete(d.jobs, id)
		}
	}
}

// Sync makes the pool's queued jobs what a poll of GitHub found: jobs the
// webhooks never announced are added, and queued records GitHub no longer
// lists (taken or cancelled, their deliveries lost) are closed. It reports
// whether the demand changed.
func (d *Demand) Sync(pool types.NamespacedName, queued []int64, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	listed := make(map[int64]bool, len(queued))
	changed := false
	for _, id := range queued {
		listed[id] = true
		if _, known := d.jobs[id]; !known {
			d.jobs[id] = &jobRecord{pool: pool, state: jobQueued, queuedAt: now, seen: now}
			changed = true
		}
	}
	for id, r := range d.jobs {
		if r.pool == pool && r.state == jobQueued && !listed[id] {
			r.state, r.seen = jobDone, now
			changed = true
		}
	}
	return changed
}
