package runnerpool

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

const (
	stateReady       = conditions.Ready
	stateProgressing = conditions.Progressing
	stateWaiting     = conditions.Waiting
	stateStalled     = conditions.Stalled
)

// outcome is what a reconcile concluded; setStatus turns it into status.
type outcome struct {
	state      conditions.State
	reason     string
	message    string
	skipStatus bool
}

// record writes the counts into status and the gauge, and concludes the
// outcome unless a phase already did.
func (r *Reconciler) record(s *scope, obs observed, desired, pendingDereg int) {
	st := &s.pool.Status
	key := client.ObjectKeyFromObject(s.pool)
	queued := r.Demand.Queued(key)
	if int32(desired) != st.DesiredReplicas { //nolint:gosec // bounded by maxReplicas
		now := metav1.NewTime(s.now)
		st.LastScaleTime = &now
	}
	st.DesiredReplicas = int32(desired)                                                 //nolint:gosec // bounded by maxReplicas
	st.Replicas = int32(obs.current())                                                  //nolint:gosec // bounded by maxReplicas
	st.PendingReplicas, st.IdleReplicas = int32(len(obs.pending)), int32(len(obs.idle)) //nolint:gosec // bounded by maxReplicas
	st.BusyReplicas = int32(len(obs.busy))                                              //nolint:gosec // bounded by maxReplicas
	st.QueuedJobs = int32(queued)                                                       //nolint:gosec // bounded by the jobs GitHub sends
	st.PendingDeregistrations = int32(pendingDereg)                                     //nolint:gosec // bounded by the registrations listed
	st.Selector = PoolLabel + "=" + s.pool.Name
	runnerCounts.set(key, map[string]int{
		StatePending: len(obs.pending), StateIdle: len(obs.idle), StateBusy: len(obs.busy), StateDeregistering: pendingDereg,
	})
	if s.outcome.reason != "" {
		return
	}
	counts := fmt.Sprintf("%d runners (%d idle, %d busy, %d starting), %d jobs queued", obs.current(), len(obs.idle), len(obs.busy), len(obs.pending), queued)
	switch {
	case pendingDereg > 0:
		s.outcome = outcome{state: stateProgressing, reason: "Deregistering",
			message: fmt.Sprintf("%s; %d runner registrations could not be removed yet and are retried", counts, pendingDereg)}
	case obs.current() != desired || len(obs.pending) > 0:
		s.outcome = outcome{state: stateProgressing, reason: "Scaling", message: fmt.Sprintf("scaling to %d: %s", desired, counts)}
	default:
		s.outcome = outcome{state: stateReady, reason: "Ready", message: counts}
	}
}

// githubError turns a failed GitHub call into the outcome and a retry.
func (r *Reconciler) githubError(s *scope, err error) (ctrl.Result, error) {
	var cred *credentialsError
	if p, ok := providers.IsPermanent(err); ok {
		s.outcome = outcome{state: stateStalled, reason: p.Reason, message: p.Message}
		return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
	}
	if errors.As(err, &cred) {
		s.outcome = outcome{state: stateStalled, reason: "CredentialsInvalid", message: err.Error()}
		return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
	}
	s.outcome = outcome{state: stateWaiting, reason: reasonOf(err, "GitHubError"), message: err.Error()}
	return r.retryAfter(err), nil
}

func reasonOf(err error, fallback string) string {
	var t *providers.TransientError
	if errors.As(err, &t) && t.Reason != "" {
		return t.Reason
	}
	if p, ok := providers.IsPermanent(err); ok {
		return p.Reason
	}
	return fallback
}

func (r *Reconciler) retryAfter(err error) ctrl.Result {
	return ctrl.Result{RequeueAfter: max(providers.RetryAfter(err), 5*time.Second)}
}

func (r *Reconciler) setStatus(s *scope) {
	if s.outcome.skipStatus || s.outcome.reason == "" {
		return
	}
	p := s.pool
	p.Status.ObservedGeneration = p.Generation
	conditions.Set(p, p.Generation, conditions.Summary{State: s.outcome.state, Reason: s.outcome.reason, Message: s.outcome.message})
}

// recordTransition emits an event when the Ready reason changes.
func (r *Reconciler) recordTransition(before, after *hypervisorv1alpha1.RunnerPool, s *scope) {
	if s.outcome.skipStatus {
		return
	}
	old, _ := conditions.ReadyMessage(before)
	reason, msg := conditions.ReadyMessage(after)
	if reason == old || reason == "" {
		return
	}
	kind := corev1.EventTypeNormal
	if s.outcome.state == stateStalled || s.outcome.state == stateWaiting {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(after, nil, kind, reason, "Reconcile", "%s", msg)
}

func patchStatus(ctx context.Context, c client.Client, before, after *hypervisorv1alpha1.RunnerPool) error {
	if apiequality.Semantic.DeepEqual(before.Status, after.Status) {
		return nil
	}
	return conditions.PatchStatus(ctx, c, before, after)
}
