package runnerpool

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Sources of a RunnerJob's latest state (status.source).
const (
	SourceWebhook = "Webhook"
	SourcePoll    = "Poll"
)

// DefaultJobRetention is how long a finished RunnerJob is kept as a
// tombstone: a redelivered "queued" within it finds the job already taken
// and scales nothing. One arriving later recreates a queued record, which
// the next poll confirms with GitHub and closes.
const DefaultJobRetention = time.Hour

// Demand records the jobs GitHub announces as RunnerJobs in the API server:
// one object per job, named job-<id> in its pool's namespace, so a job is
// recorded once whichever replica, delivery or poll reports it, and the
// demand survives restarts and failovers. Any replica may record; only the
// leader's reconciler reads and prunes.
type Demand struct {
	// Client creates and patches RunnerJobs.
	Client client.Client
	// Reader reads a RunnerJob fresh from the API server when its create
	// found it existing (the manager's APIReader): the state it advances
	// from must not be a stale cached one.
	Reader client.Reader
}

// JobName is the RunnerJob name of GitHub job id.
func JobName(id int64) string { return "job-" + strconv.FormatInt(id, 10) }

// stateOf maps a workflow_job action to a RunnerJob state; "" for actions
// that say nothing about demand.
func stateOf(a github.JobAction) hypervisorv1alpha1.RunnerJobState {
	switch a {
	case github.JobWaiting:
		return hypervisorv1alpha1.JobWaiting
	case github.JobQueued:
		return hypervisorv1alpha1.JobQueued
	case github.JobInProgress:
		return hypervisorv1alpha1.JobInProgress
	case github.JobCompleted:
		return hypervisorv1alpha1.JobCompleted
	}
	return ""
}

// Record applies a job event to the pool's record of the job: it creates
// the record, or moves it forward, never back. It reports whether the state
// changed and, for a queued job a runner just took, how long it waited. An
// error means the event is not recorded (the receiver answers 5xx so GitHub
// shows a failed delivery to redeliver).
func (d *Demand) Record(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool, job github.JobEvent, source string, now time.Time) (changed bool, waited time.Duration, err error) {
	_, changed, waited, err = d.record(ctx, pool, job, source, now)
	return changed, waited, err
}

// record is Record, also returning the record it created (nil when it
// advanced or left an existing one).
func (d *Demand) record(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool, job github.JobEvent, source string, now time.Time) (*hypervisorv1alpha1.RunnerJob, bool, time.Duration, error) {
	next := stateOf(job.Action)
	if next == "" {
		return nil, false, 0, nil
	}
	rec := &hypervisorv1alpha1.RunnerJob{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(job.ID), Namespace: pool.Namespace, Labels: map[string]string{PoolLabel: pool.Name}},
		Spec: hypervisorv1alpha1.RunnerJobSpec{PoolRef: meta.LocalObjectReference{Name: pool.Name}, JobID: job.ID, RunID: job.RunID,
			Repository: job.Owner + "/" + job.Repository, Labels: job.Labels},
	}
	t := metav1.NewTime(now)
	rec.Status = hypervisorv1alpha1.RunnerJobStatus{State: next, RunnerName: job.RunnerName, Source: source, LastTransitionTime: &t}
	if next.Rank() <= hypervisorv1alpha1.JobQueued.Rank() {
		rec.Status.QueuedAt = &t
	}
	key := types.NamespacedName{Namespace: pool.Namespace, Name: rec.Name}
	if next.Rank() > hypervisorv1alpha1.JobQueued.Rank() {
		if changed, waited, done, err := d.advanceCached(ctx, key, job, next, source, now); done {
			return nil, changed, waited, err
		}
	}
	// The pool owns its records: deleting it deletes them.
	if err := controllerutil.SetControllerReference(pool, rec, d.Client.Scheme()); err != nil {
		return nil, false, 0, err
	}
	err := d.Client.Create(ctx, rec)
	if err == nil {
		return rec, true, 0, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, 0, fmt.Errorf("recording job %d as RunnerJob %s/%s: %w", job.ID, pool.Namespace, rec.Name, err)
	}
	changed, waited, err := d.advance(ctx, key, job, next, source, now)
	return nil, changed, waited, err
}

// advanceCached moves the record of a job that started or ended forward
// from the cache's copy, which almost always exists (the job was recorded
// queued first) and is current: a patch with its resourceVersion as
// precondition, one request. Before, each such delivery was a create
// answered AlreadyExists, a read past the cache and a patch. done is false
// when the cache does not have the record (it is created), and a conflict
// (the cache was behind) goes on from a fresh read.
func (d *Demand) advanceCached(ctx context.Context, key types.NamespacedName, job github.JobEvent, next hypervisorv1alpha1.RunnerJobState, source string, now time.Time) (changed bool, waited time.Duration, done bool, err error) {
	cur := &hypervisorv1alpha1.RunnerJob{}
	if err := d.Client.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			return false, 0, false, nil
		}
		return false, 0, true, fmt.Errorf("reading RunnerJob %s: %w", key, err)
	}
	changed, waited, err = d.advanceFrom(ctx, cur, job, next, source, now, client.MergeFromWithOptimisticLock{})
	switch {
	case apierrors.IsConflict(err):
		changed, waited, err = d.advance(ctx, key, job, next, source, now)
	case apierrors.IsNotFound(err):
		return false, 0, false, nil // pruned since: recorded anew
	}
	return changed, waited, true, err
}

// advance moves an existing record forward to next. The API server refuses
// a step back (the CRD's transition rule), so two replicas advancing the
// same record from different reads cannot undo each other.
func (d *Demand) advance(ctx context.Context, key types.NamespacedName, job github.JobEvent, next hypervisorv1alpha1.RunnerJobState, source string, now time.Time) (bool, time.Duration, error) {
	cur := &hypervisorv1alpha1.RunnerJob{}
	if err := d.Reader.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			return false, 0, nil // pruned or its pool deleted meanwhile: nothing to count
		}
		return false, 0, fmt.Errorf("reading RunnerJob %s: %w", key, err)
	}
	return d.advanceFrom(ctx, cur, job, next, source, now)
}

// advanceFrom moves rec forward to next; rec is the state it was read in.
// With the optimistic lock, a conflict and a not-found come back as they
// are, for the caller to read afresh.
func (d *Demand) advanceFrom(ctx context.Context, rec *hypervisorv1alpha1.RunnerJob, job github.JobEvent, next hypervisorv1alpha1.RunnerJobState, source string, now time.Time, opts ...client.MergeFromOption) (bool, time.Duration, error) {
	if rec.Status.State.Rank() >= next.Rank() {
		return false, 0, nil // a redelivery, or news older than what is recorded
	}
	var waited time.Duration
	if rec.Status.State == hypervisorv1alpha1.JobQueued && rec.Status.QueuedAt != nil {
		waited = now.Sub(rec.Status.QueuedAt.Time)
	}
	base := rec.DeepCopy()
	t := metav1.NewTime(now)
	rec.Status.State, rec.Status.Source, rec.Status.LastTransitionTime = next, source, &t
	if next == hypervisorv1alpha1.JobQueued {
		rec.Status.QueuedAt = &t
	}
	if job.RunnerName != "" {
		rec.Status.RunnerName = job.RunnerName
	}
	if err := d.Client.Patch(ctx, rec, client.MergeFromWithOptions(base, opts...)); err != nil {
		*rec = *base
		locked := len(opts) > 0
		switch {
		case locked && (apierrors.IsConflict(err) || apierrors.IsNotFound(err)):
			return false, 0, err
		case apierrors.IsNotFound(err):
			return false, 0, nil
		case apierrors.IsInvalid(err):
			// Another replica moved it further first: the state recorded
			// is newer than this event.
			return false, 0, nil
		}
		return false, 0, fmt.Errorf("advancing RunnerJob %s/%s to %s: %w", rec.Namespace, rec.Name, next, err)
	}
	if next != hypervisorv1alpha1.JobInProgress {
		waited = 0
	}
	return true, waited, nil
}

// poolDemand is a pool's recorded demand as one reconcile read it.
type poolDemand struct {
	records []hypervisorv1alpha1.RunnerJob
	// queued jobs wait for a runner; waiting ones for an approval.
	queued, waiting int
	// named: the runners a record names (InProgress or Completed): the
	// runners whose job the records already account for.
	named map[string]bool
}

// readDemand reads the pool's RunnerJobs from the cache.
func (r *Reconciler) readDemand(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool) (*poolDemand, error) {
	var list hypervisorv1alpha1.RunnerJobList
	if err := r.Client.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingLabels{PoolLabel: pool.Name}); err != nil {
		return nil, fmt.Errorf("listing the pool's RunnerJobs: %w", err)
	}
	d := &poolDemand{records: list.Items}
	d.count()
	return d, nil
}

// count tallies the records, after a read or after the poll changed some.
func (d *poolDemand) count() {
	d.queued, d.waiting, d.named = 0, 0, map[string]bool{}
	for _, j := range d.records {
		switch j.Status.State {
		case hypervisorv1alpha1.JobQueued:
			d.queued++
		case hypervisorv1alpha1.JobWaiting:
			d.waiting++
		case hypervisorv1alpha1.JobInProgress, hypervisorv1alpha1.JobCompleted:
			if j.Status.RunnerName != "" {
				d.named[j.Status.RunnerName] = true
			}
		}
	}
}

// want is the runners the demand needs: every busy runner, plus one per
// queued job no runner has taken yet. The records trail GitHub: a job's
// in_progress and completed deliveries can arrive seconds after its runner
// took it, or, at a failover, only once redelivered. A runner that is busy,
// or that finished a job (finished), and that no record names most likely
// took one of the jobs still recorded queued, so each such runner stands for
// one of them: counting both is what would make a second runner for one job.
func (d *poolDemand) want(busy, finished []*hypervisorv1alpha1.MachineClaim) int {
	taken := 0
	for _, c := range append(busy[:len(busy):len(busy)], finished...) {
		if !d.named[c.Name] {
			taken++
		}
	}
	return len(busy) + max(0, d.queued-taken)
}

// pruneJobs deletes the pool's finished records once past the retention,
// and InProgress ones as old whose runner is no longer registered (their
// completed delivery lost); a job still queued or waiting is never pruned
// here, only closed by the poll after GitHub confirmed it.
func (r *Reconciler) pruneJobs(ctx context.Context, s *scope) (skeleton.Result, error) {
	if s.demand == nil || s.obs == nil {
		return skeleton.Continue(), nil
	}
	retention := r.JobRetention
	for i := range s.demand.records {
		j := &s.demand.records[i]
		at := j.CreationTimestamp.Time
		if t := j.Status.LastTransitionTime; t != nil {
			at = t.Time
		}
		if s.now.Sub(at) < retention {
			continue
		}
		switch j.Status.State {
		case hypervisorv1alpha1.JobCompleted:
		case hypervisorv1alpha1.JobInProgress:
			if _, registered := s.obs.byName[j.Status.RunnerName]; registered {
				continue
			}
		default:
			continue
		}
		if err := r.Client.Delete(ctx, j, client.Preconditions{ResourceVersion: &j.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("Deleting a finished RunnerJob failed; retried next reconcile", "runnerJob", j.Name, "error", err.Error())
		}
	}
	return skeleton.Continue(), nil
}

// HandleJob is the webhook receiver's handler, run on whichever replica
// received the delivery, before it is answered: it finds the pool for a
// workflow_job and records the job's progress as a RunnerJob. The leader's
// reconciler sees the record through its watch. An error answers the
// delivery 5xx, so GitHub shows it failed and it can be redelivered.
func (r *Reconciler) HandleJob(ctx context.Context, job github.JobEvent) error {
	var pools hypervisorv1alpha1.RunnerPoolList
	if err := r.Client.List(ctx, &pools); err != nil {
		return fmt.Errorf("listing RunnerPools: %w", err)
	}
	pool, ok := MatchPool(pools.Items, job)
	if !ok {
		ctrl.LoggerFrom(ctx).V(1).Info("No RunnerPool serves this job", "job", job.ID, "repository", job.Owner+"/"+job.Repository, "labels", job.Labels)
		return nil
	}
	if webhookScalingOff(pool) {
		return nil
	}
	_, waited, err := r.Demand.Record(ctx, pool, job, SourceWebhook, r.Clock.Now())
	if waited > 0 {
		queueLatency.WithLabelValues(client.ObjectKeyFromObject(pool).String()).Observe(waited.Seconds())
	}
	return err
}
