package runnerpool

import (
	"context"
	"errors"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// maxConfirmsPerPoll bounds the single-job reads one poll spends on
// records GitHub no longer lists as waiting or queued; the rest are
// confirmed at the next poll, and keep counting until then.
const maxConfirmsPerPoll = 50

// readJobs reads the pool's recorded demand; scaling depends on it.
func (r *Reconciler) readJobs(ctx context.Context, s *scope) (skeleton.Result, error) {
	d, err := r.readDemand(ctx, s.pool)
	if err != nil {
		return skeleton.Stop(), err
	}
	s.demand = d
	return skeleton.Continue(), nil
}

// pollQueuedJobs reconciles the pool's recorded demand with GitHub's truth
// every pollInterval (repository and organization pools alike): every job
// of every unfinished run (ActiveJobs) that would be routed to this pool is
// recorded or moved forward, so a lost delivery is made up for and a job
// GitHub shows started or finished stops counting within one interval. The
// listing is the one every pool on the same credential and scope shares
// (joblist): a pool takes it when it started less than the pool's interval
// ago and after the listing the pool's last poll used, else lists (once for
// every pool asking meanwhile), so pools of one repository poll it once an
// interval between them; the routing below is the pool's own. The next
// poll is due when the listing this one took is an interval old, not an
// interval after this poll (pollDue), so a shared listing taken late does
// not stretch the bound to two intervals. A
// waiting or queued record GitHub does not list is read on its own before
// it is closed: a job still queued is never dropped because a listing
// missed it. A failed poll is only logged; the records still scale the pool.
func (r *Reconciler) pollQueuedJobs(ctx context.Context, s *scope) (skeleton.Result, error) {
	interval := time.Minute
	if w := s.pool.Spec.WebhookScaling; w != nil && w.PollInterval != nil {
		interval = w.PollInterval.Duration
	}
	if interval <= 0 || s.demand == nil || scaleSetMode(s.pool) {
		return skeleton.Continue(), nil
	}
	if left := pollDue(s.now, s.mem.lastPoll, r.Jobs.Now(), s.mem.lastJobs, interval); left > 0 {
		return skeleton.Requeue(left), nil
	}
	log := ctrl.LoggerFrom(ctx)
	snap, err := r.Jobs.Get(ctx, s.gh, s.gscope, interval, s.mem.lastJobs)
	if err != nil {
		log.V(1).Info("Polling the active jobs failed; the recorded demand still scales the pool", "error", err.Error())
		return skeleton.Continue(), nil
	}
	jobs := snap.Jobs
	s.mem.lastPoll, s.mem.lastJobs = s.now, snap.Started
	// A shared listing that started well before this poll makes the next
	// one due sooner than an interval from now.
	res := skeleton.Continue()
	if left := pollDue(s.now, s.mem.lastPoll, r.Jobs.Now(), s.mem.lastJobs, interval); left > 0 {
		res = skeleton.Requeue(left)
	}
	var pools hypervisorv1alpha1.RunnerPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return res, nil
	}
	key := client.ObjectKeyFromObject(s.pool)
	// This reconcile's listing just proved the pool reaches its scope; the
	// cached copy may not show it yet (status is written at the end).
	for i := range pools.Items {
		if client.ObjectKeyFromObject(&pools.Items[i]) == key {
			pools.Items[i].Status.ReachedScope = s.pool.Status.ReachedScope
		}
	}
	byID := map[int64]*hypervisorv1alpha1.RunnerJob{}
	for i := range s.demand.records {
		byID[s.demand.records[i].Spec.JobID] = &s.demand.records[i]
	}
	listed := map[int64]bool{}
	var created []hypervisorv1alpha1.RunnerJob
	changes := 0
	for _, j := range jobs {
		ev := j.Event()
		// Listed by this pool's client: on its GitHub.
		ev.Host = github.APIHost(s.pool.Spec.GitHub.APIURL)
		if s.gscope.Organization != "" {
			ev.Organization = s.gscope.Organization
		}
		if p, ok := MatchPool(pools.Items, ev); !ok || client.ObjectKeyFromObject(p) != key {
			continue
		}
		listed[j.ID] = true
		next := stateOf(ev.Action)
		rec, known := byID[j.ID]
		switch {
		case !known && next.Rank() <= hypervisorv1alpha1.JobQueued.Rank():
			// A job no delivery announced (or one not yet recorded).
			made, changed, _, err := r.Demand.record(ctx, s.pool, ev, SourcePoll, s.now)
			if err != nil {
				log.Error(err, "Recording a polled job failed", "job", j.ID)
				continue
			}
			if made != nil {
				created = append(created, *made)
			}
			if changed {
				changes++
			}
		case known:
			if changed, _, err := r.Demand.advanceFrom(ctx, rec, ev, next, SourcePoll, s.now); err != nil {
				log.Error(err, "Advancing a polled job failed", "job", j.ID)
			} else if changed {
				changes++
			}
		}
	}
	changes += r.confirmUnlisted(ctx, s, listed)
	s.demand.records = append(s.demand.records, created...)
	s.demand.count()
	if changes > 0 {
		log.V(1).Info("Polled jobs changed the pool's demand", "changes", changes, "queued", s.demand.queued, "waiting", s.demand.waiting)
	}
	return res, nil
}

// pollDue says how long until the pool's demand poll is due; zero or less
// is now. The pool sees GitHub as the listing its last poll took, which a
// shared listing makes up to an interval older than that poll: counted from
// the poll, a change GitHub showed just after such a listing started would
// count for up to two intervals. So the poll is due once that listing
// (started lastList by the listings' clock, listNow) is an interval old;
// or an interval after the last poll by the pool's clock, which is the
// listings' clock in production and lets the suites' fake clock make polls
// due. A pool that never polled is due at once.
func pollDue(now, lastPoll, listNow, lastList time.Time, interval time.Duration) time.Duration {
	return min(interval-now.Sub(lastPoll), interval-listNow.Sub(lastList))
}

// confirmUnlisted reads, one by one, the waiting and queued records GitHub
// did not list, and moves each to the state GitHub reports; a job GitHub
// no longer knows (its run deleted) is closed. It returns how many changed.
func (r *Reconciler) confirmUnlisted(ctx context.Context, s *scope, listed map[int64]bool) int {
	changes, reads := 0, 0
	for i := range s.demand.records {
		rec := &s.demand.records[i]
		if rec.Status.State.Rank() > hypervisorv1alpha1.JobQueued.Rank() || listed[rec.Spec.JobID] {
			continue
		}
		if reads == maxConfirmsPerPoll {
			break
		}
		reads++
		owner, repo, _ := strings.Cut(rec.Spec.Repository, "/")
		got, err := s.gh.GetJob(ctx, s.gscope, owner, repo, rec.Spec.JobID)
		ev := github.JobEvent{ID: rec.Spec.JobID, Action: github.JobCompleted}
		switch {
		case errors.Is(err, providers.ErrNotFound):
		case err != nil:
			ctrl.LoggerFrom(ctx).V(1).Info("Confirming an unlisted job failed; it keeps counting", "job", rec.Spec.JobID, "error", err.Error())
			continue
		default:
			ev = got.Event()
		}
		if changed, _, err := r.Demand.advanceFrom(ctx, rec, ev, stateOf(ev.Action), SourcePoll, s.now); err == nil && changed {
			changes++
		}
	}
	return changes
}
