package runnerpool

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
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
	if s.demand == nil {
		return
	}
	finished := map[string]bool{}
	for _, j := range s.demand.records {
		if j.Status.State == hypervisorv1alpha1.JobCompleted && j.Status.RunnerName != "" {
			finished[j.Status.RunnerName] = true
		}
	}
	var stale []string
	for _, rn := range ours(s.pool, s.runners) {
		if finished[rn.Name] && !s.mem.refreshedFor[rn.Name] {
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
	s.runners = snap.Runners
	for _, name := range stale {
		s.mem.refreshedFor[name] = true
	}
}
