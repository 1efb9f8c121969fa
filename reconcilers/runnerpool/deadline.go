package runnerpool

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// deletionSeenAnnotation records when the pool's reconciler first saw the
// pool deleted, by its own clock. FinalizationTimeout runs from it, so the
// deadline is measured with the clock every other time the pool compares
// comes from (createdAtAnnotation says why): measured against the API
// server's deletionTimestamp, a clock ahead of the API server's would put a
// deleted pool past its deadline at once, and it would let go of its
// machines and registrations without trying. With the real clock it is the
// deletionTimestamp, give or take a reconcile. It lives on the pool, so a
// restarted manager keeps the deadline it had.
const deletionSeenAnnotation = "hyperfleet.io/deletion-seen-at"

// deletionDeadline is when the deleted pool stops waiting for its cleanup:
// FinalizationTimeout after its reconciler first saw it deleted. The first
// time, it records that moment on the pool; if that write fails, it falls
// back to the deletionTimestamp this once (the next reconcile records it).
func (r *Reconciler) deletionDeadline(ctx context.Context, s *scope) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, s.pool.Annotations[deletionSeenAnnotation]); err == nil {
		return t.Add(r.FinalizationTimeout)
	}
	patch := client.MergeFrom(s.pool.DeepCopy())
	if s.pool.Annotations == nil {
		s.pool.Annotations = map[string]string{}
	}
	s.pool.Annotations[deletionSeenAnnotation] = s.now.UTC().Format(time.RFC3339Nano)
	if err := r.Client.Patch(ctx, s.pool, patch); err != nil {
		delete(s.pool.Annotations, deletionSeenAnnotation)
		return skeleton.DeletionDeadline(s.pool, r.FinalizationTimeout)
	}
	s.patch.Rebase()
	return s.now.Add(r.FinalizationTimeout)
}
