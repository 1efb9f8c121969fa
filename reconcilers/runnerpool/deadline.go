package runnerpool

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
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

// maxNamedClaims bounds the claims a deadline event names: an event's note
// holds at most 1 KiB.
const maxNamedClaims = 8

// leftBehind says what a pool released at its deadline may have left, and
// where each goes or what a person must do: the claims it still saw (their
// own finalizers delete their machines, or the orphan sweeper does), and
// the registrations, which it no longer lists past the deadline, by the
// label GitHub shows them with.
func leftBehind(timeout time.Duration, pool *hypervisorv1alpha1.RunnerPool, s *scope) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Released after %s without finishing its cleanup. ", timeout)
	switch n := len(s.leftClaims); {
	case n == 0 && s.cleanupErr != nil:
		fmt.Fprintf(&b, "Its MachineClaims could not be checked (%v); ", s.cleanupErr)
	case n > 0:
		named := s.leftClaims[:min(n, maxNamedClaims)]
		more := ""
		if n > len(named) {
			more = fmt.Sprintf(" and %d more", n-len(named))
		}
		fmt.Fprintf(&b, "MachineClaims left: %s%s (their finalizers, or the orphan sweeper, delete their machines); ", strings.Join(named, ", "), more)
	}
	fmt.Fprintf(&b, "remove any runner still registered on GitHub with the label %s (Settings → Actions → Runners).", runnerstate.PoolRunnerLabel(pool))
	return b.String()
}
