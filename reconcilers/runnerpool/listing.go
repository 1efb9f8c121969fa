package runnerpool

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// refreshIfFinished replaces the reconcile's shared runner listing with a
// fresh one when it still shows a runner of the pool whose recorded job
// has completed. An ephemeral runner leaves GitHub with its job, so such a
// listing predates the completion, and the slot the runner held would stay
// taken until the next shared listing (up to SyncInterval) instead of
// being refilled. Fresh listings are shared by every pool asking at the
// same time, and each finished runner asks once (poolMemory.refreshedFor),
// so a runner GitHub is slow to remove costs one listing, not one per
// reconcile. A failed refresh leaves the older listing: the next tells.
func (r *Reconciler) refreshIfFinished(ctx context.Context, s *scope) {
	s.finished = finishedRunners(s.demand)
	var stale []string
	for _, rn := range runnerstate.Ours(s.pool, s.runners) {
		if s.finished[rn.Name] && !s.mem.refreshedFor[rn.Name] {
			stale = append(stale, rn.Name)
		}
	}
	if len(stale) == 0 {
		return
	}
	snap, err := r.Runners.Fresh(ctx, s.gh, s.gscope)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Refreshing the runner listing failed; the shared one still serves", "error", err.Error())
		return
	}
	s.runners, s.listedAt = snap.Runners, snap.Started
	for _, name := range stale {
		s.mem.refreshedFor[name] = true
	}
}

// finishedRunners are the runners whose job is recorded Completed. A pool's
// runners are ephemeral, one job each, so each of them is over, and each
// was online, whether or not a listing caught it between its registration
// and its job's end.
func finishedRunners(d *poolDemand) map[string]bool {
	finished := map[string]bool{}
	if d == nil {
		return finished
	}
	for _, j := range d.records {
		if j.Status.State == hypervisorv1alpha1.JobCompleted && j.Status.RunnerName != "" {
			finished[j.Status.RunnerName] = true
		}
	}
	return finished
}
