// Package skeleton is the shape every HyperFleet reconciler shares, so that a
// newcomer who has read one reconciler can find their way in all of them:
//
//	func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
//		obj := &v1alpha1.Kind{}
//		if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
//			return ctrl.Result{}, client.IgnoreNotFound(err)
//		}
//		s := &scope{obj: obj, now: r.Clock.Now()}
//		patch := skeleton.NewStatusPatch(r.Client, obj)
//		defer func() { result, retErr = patch.Finalize(ctx, computeStatus(s, retErr), result, retErr) }()
//		if !obj.DeletionTimestamp.IsZero() {
//			return skeleton.RunPhases(ctx, s, r.reconcileDelete...)
//		}
//		return skeleton.RunPhases(ctx, s, r.phases...)
//	}
//
// RunPhases follows Cluster API's machine controller: ordered phase
// functions, errors collected, the shortest requeue wins. StatusPatch
// follows Flux's deferred finalize-status: status is computed in one place
// (each kind's computeStatus, a pure function of what the phases observed,
// table-tested in its *_status_test.go), observedGeneration is stamped only
// when the reconcile succeeded, a Stalled error is terminal, conflicts
// requeue silently, and nothing is written when nothing changed.
package skeleton
