package executor

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Ready condition reasons of HourglassExecutors.
const (
	ReasonAvailable      = "Available"
	ReasonRollingOut     = "RollingOut"
	ReasonRolloutStalled = "RolloutStalled"
	ReasonReplicaFailure = "ReplicaFailure"
	ReasonConflict       = "ObjectConflict"
	ReasonReconcileError = "ReconcileError"

	// EventConfigChanged: the configuration changed and the Deployment rolls.
	EventConfigChanged = "ConfigChanged"
)

// computeStatus sets the status fields from what the phases observed and
// returns the summary the Ready, Reconciling and Stalled conditions show.
// It is pure: the same observations give the same status.
func computeStatus(s *scope, err error) conditions.Summary {
	e := s.exec
	if d := s.deployment; d != nil {
		st := &e.Status
		st.Replicas, st.ReadyReplicas, st.AvailableReplicas = d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas
		st.ConfigHash = d.Spec.Template.Annotations[AnnotationConfigHash]
		st.ConfigMapName = ConfigMapName(e)
	}
	e.Status.Selector = podSelector(e)
	var stalled *skeleton.StalledError
	switch {
	case errors.As(err, &stalled):
		return conditions.Summary{State: conditions.Stalled, Reason: stalled.Reason, Message: stalled.Message}
	case err != nil:
		return conditions.Summary{State: conditions.Waiting, Reason: ReasonReconcileError, Message: fmt.Sprintf("retrying: %v", err)}
	case !e.DeletionTimestamp.IsZero():
		return conditions.Summary{State: conditions.Progressing, Reason: meta.DeletingReason,
			Message: "the HourglassExecutor is being deleted; its Deployment and ConfigMap go with it"}
	}
	return rolloutSummary(s)
}

// rolloutSummary concludes from the Deployment (as the API server returned
// it from the apply, so a roll just started is not mistaken for a finished
// one) and the keys Secret.
func rolloutSummary(s *scope) conditions.Summary {
	e, d := s.exec, s.deployment
	if s.keysFound != nil && !*s.keysFound {
		return conditions.Summary{State: conditions.Waiting, Reason: meta.SecretNotFoundReason, Message: fmt.Sprintf(
			"Secret %s (spec.operatorKeys.secretRef) not found in namespace %s: create it, normally through an ExternalSecret; the executor Pods start once it exists",
			e.Spec.OperatorKeys.SecretRef.Name, e.Namespace)}
	}
	want := defaultReplicas
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation {
		return conditions.Summary{State: conditions.Progressing, Reason: ReasonRollingOut, Message: fmt.Sprintf(
			"rolling out Deployment %s (configuration %s)", d.Name, s.configHash)}
	}
	if c := deploymentCondition(d, appsv1.DeploymentProgressing); c != nil && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
		return conditions.Summary{State: conditions.Stalled, Reason: ReasonRolloutStalled, Message: fmt.Sprintf(
			"the rollout of Deployment %s stopped making progress (%s): look at its Pods with kubectl describe pods -l %s=%s",
			d.Name, c.Message, LabelName, e.Name)}
	}
	if c := deploymentCondition(d, appsv1.DeploymentReplicaFailure); c != nil && c.Status == corev1.ConditionTrue {
		return conditions.Summary{State: conditions.Waiting, Reason: ReasonReplicaFailure, Message: fmt.Sprintf(
			"Deployment %s cannot create its Pods: %s; fix what it names (spec.serviceAccountName, a quota, a policy)", d.Name, c.Message)}
	}
	if st.UpdatedReplicas < want || st.AvailableReplicas < want || st.Replicas > want {
		return conditions.Summary{State: conditions.Progressing, Reason: ReasonRollingOut, Message: fmt.Sprintf(
			"rolling out: %d of %d Pods updated to configuration %s, %d available", st.UpdatedReplicas, want, s.configHash, st.AvailableReplicas)}
	}
	if want == 0 {
		return conditions.Summary{State: conditions.Ready, Reason: ReasonAvailable, Message: "scaled to zero replicas"}
	}
	return conditions.Summary{State: conditions.Ready, Reason: ReasonAvailable, Message: fmt.Sprintf(
		"%d of %d executors available with configuration %s", st.AvailableReplicas, want, s.configHash)}
}

func deploymentCondition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// recordEvents emits events on changes only, comparing the status as read
// with the status as written: a new configuration, a first Ready, a new
// reason to be stuck or a missing keys Secret.
func (r *Reconciler) recordEvents(_ *scope, before, after *hourglassv1alpha1.HourglassExecutor, _ conditions.Summary) {
	if old, cur := before.Status.ConfigHash, after.Status.ConfigHash; old != "" && cur != "" && old != cur && r.firstSight(after, cur) {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, EventConfigChanged, "Rollout",
			"Configuration changed from %s to %s; rolling Deployment %s", old, cur, DeploymentName(after))
		configRollouts.WithLabelValues(after.Namespace, after.Name).Inc()
	}
	reason, msg := conditions.ReadyMessage(after)
	switch {
	case apimeta.IsStatusConditionTrue(after.Status.Conditions, meta.ReadyCondition) &&
		!apimeta.IsStatusConditionTrue(before.Status.Conditions, meta.ReadyCondition):
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Ready", "Reconcile", "%s", msg)
	case apimeta.IsStatusConditionTrue(after.Status.Conditions, meta.StalledCondition) || reason == meta.SecretNotFoundReason:
		skeleton.ReasonEvent(r.Recorder, before, after, "Reconcile", true)
	}
}

// firstSight reports whether this process has not yet announced the
// configuration hash for the executor. A reconcile that read a stale status
// from the cache sees the same change again; it is one rollout, so one
// event and one count. After a restart a change may be announced once more.
func (r *Reconciler) firstSight(e *hourglassv1alpha1.HourglassExecutor, hash string) bool {
	prev, seen := r.announced.Swap(e, hash)
	return !seen || prev != hash
}
