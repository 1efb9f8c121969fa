// Package skeleton is the shape every HyperFleet reconciler shares, so that a
// newcomer who has read one reconciler can find their way in all of them:
//
//	func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
//		return r.driver().Reconcile(ctx, req)
//	}
//
// where driver returns a Driver over the kind's Kind: its phases and
// deletion phases, computeStatus, event policy and per-object Memory. The
// Driver reads the object, refuses an undecodable one, keeps the finalizer,
// finalizes the status once and emits events only after it concluded.
//
// RunPhases follows Cluster API's machine controller: ordered phase
// functions, errors collected, the shortest requeue wins. StatusPatch
// follows Flux's deferred finalize-status: status is computed in one place
// (each kind's computeStatus, a pure function of what the phases observed,
// table-tested in its *_status_test.go), observedGeneration is stamped only
// when the reconcile succeeded, a Stalled error is terminal, conflicts
// requeue silently, and nothing is written when nothing changed.
package skeleton
