package runnerpool

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// computeStatus writes the pool's counts from what the phases observed and
// returns the summary the conditions are set from. It is pure: a function
// of the scope and the reconcile's error, table-tested in
// runnerpool_status_test.go. An empty summary leaves the conditions as they
// are: an error the next reconcile retries says nothing new about the pool.
func computeStatus(s *scope, err error) conditions.Summary {
	if !s.pool.DeletionTimestamp.IsZero() {
		return deletingSummary(s)
	}
	if s.scaled != nil {
		setCounts(s)
	}
	switch {
	case s.templateMissing:
		return conditions.Summary{State: conditions.Stalled, Reason: meta.DependencyNotFoundReason,
			Message: fmt.Sprintf("HypervisorMachineTemplate %s (spec.templateRef) not found; create it", s.pool.Spec.TemplateRef.Name)}
	case s.scaleSetTaken != nil:
		return conditions.Summary{State: conditions.Stalled, Reason: "ScaleSetTaken", Message: s.scaleSetTaken.Error()}
	case s.githubErr != nil:
		summary, _ := githubOutcome(s.githubErr)
		return summary
	case err != nil:
		return conditions.Summary{}
	case s.createErr != nil:
		return conditions.Summary{State: conditions.Waiting, Reason: reasonOf(s.createErr, "RunnerCreateFailed"),
			Message: "creating a runner: " + s.createErr.Error()}
	case s.scaled == nil:
		return conditions.Summary{}
	}
	if sum := sessionSummary(s); sum != nil {
		return *sum
	}
	return scaledSummary(s)
}

// deletingSummary: a deleted pool is Reconciling until its machines and
// registrations are gone; the message says why the cleanup is retried.
func deletingSummary(s *scope) conditions.Summary {
	msg := "deleting the pool's machines and deregistering its runners"
	if s.cleanupErr != nil {
		msg = fmt.Sprintf("cleaning up, retrying: %v", s.cleanupErr)
	}
	return conditions.Summary{State: conditions.Progressing, Reason: "Deleting", Message: msg}
}

// setCounts writes the runner counts scale worked from; lastScaleTime moves
// when the desired count does.
func setCounts(s *scope) {
	st, obs, sc := &s.pool.Status, s.obs, s.scaled
	if int32(sc.desired) != st.DesiredReplicas { //nolint:gosec // bounded by maxReplicas
		now := metav1.NewTime(s.now)
		st.LastScaleTime = &now
	}
	st.DesiredReplicas = int32(sc.desired)                                              //nolint:gosec // bounded by maxReplicas
	st.Replicas = int32(obs.current())                                                  //nolint:gosec // bounded by maxReplicas
	st.PendingReplicas, st.IdleReplicas = int32(len(obs.pending)), int32(len(obs.idle)) //nolint:gosec // bounded by maxReplicas
	st.BusyReplicas = int32(len(obs.busy))                                              //nolint:gosec // bounded by maxReplicas
	st.QueuedJobs = int32(sc.queued)                                                    //nolint:gosec // bounded by the jobs GitHub sends
	st.PendingDeregistrations = int32(s.pendingDereg)                                   //nolint:gosec // bounded by the registrations listed
	st.Selector = PoolLabel + "=" + s.pool.Name
}

// scaledSummary: Ready once the pool has the runners it wants, all up, and
// every registration it retired is gone.
func scaledSummary(s *scope) conditions.Summary {
	obs, sc := s.obs, s.scaled
	counts := fmt.Sprintf("%d runners (%d idle, %d busy, %d starting), %d jobs queued", obs.current(), len(obs.idle), len(obs.busy), len(obs.pending), sc.queued)
	if st := s.pool.Status.ScaleSet; st != nil && scaleSetMode(s.pool) {
		counts = fmt.Sprintf("%d runners (%d idle, %d busy, %d starting), %d jobs assigned to scale set %q", obs.current(), len(obs.idle), len(obs.busy), len(obs.pending), st.AssignedJobs, s.pool.Spec.GitHub.ScaleSet.Name)
	}
	switch {
	case s.pendingDereg > 0:
		return conditions.Summary{State: conditions.Progressing, Reason: "Deregistering",
			Message: fmt.Sprintf("%s; %d runner registrations could not be removed yet and are retried", counts, s.pendingDereg)}
	case obs.current() != sc.desired || len(obs.pending) > 0:
		return conditions.Summary{State: conditions.Progressing, Reason: "Scaling", Message: fmt.Sprintf("scaling to %d: %s", sc.desired, counts)}
	}
	return conditions.Summary{State: conditions.Ready, Reason: "Ready", Message: counts}
}

// githubOutcome classifies a failed GitHub call: refused credentials or a
// missing permission stall the pool (looked at again every 30 s, since the
// Secret or the App's grants change outside the pool); anything else is a
// wait, retried when GitHub said to or after 5 s.
func githubOutcome(err error) (conditions.Summary, time.Duration) {
	var cred *runnerstate.CredentialsError
	if p, ok := providers.IsPermanent(err); ok {
		return conditions.Summary{State: conditions.Stalled, Reason: p.Reason, Message: p.Message}, 30 * time.Second
	}
	if errors.As(err, &cred) {
		return conditions.Summary{State: conditions.Stalled, Reason: "CredentialsInvalid", Message: err.Error()}, 30 * time.Second
	}
	return conditions.Summary{State: conditions.Waiting, Reason: reasonOf(err, "GitHubError"), Message: err.Error()}, retryAfter(err)
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

// retryAfter is when to call GitHub again after err: when it said, and
// not sooner than 5 s.
func retryAfter(err error) time.Duration {
	return max(providers.RetryAfter(err), 5*time.Second)
}

// recordTransition is the pool's event policy: an event when the Ready
// reason changes, a Warning when the pool stalls or waits. Scaling and
// cleanup actions record their own events where they happen.
func (r *Reconciler) recordTransition(before skeleton.Object, after *hypervisorv1alpha1.RunnerPool, summary conditions.Summary) {
	warning := summary.State == conditions.Stalled || summary.State == conditions.Waiting
	skeleton.ReasonEvent(r.Recorder, before, after, "Reconcile", warning)
}
