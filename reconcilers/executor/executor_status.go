package executor

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
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

type outcome struct {
	state   conditions.State
	reason  string
	message string
	// keepObservedGeneration: the reconcile failed part-way.
	keepObservedGeneration bool
}

func stalled(reason, message string) outcome {
	return outcome{state: conditions.Stalled, reason: reason, message: message}
}

func deleting() outcome {
	return outcome{state: conditions.Progressing, reason: meta.DeletingReason,
		message: "the HourglassExecutor is being deleted; its Deployment and ConfigMap go with it"}
}

func retrying(err error) outcome {
	return outcome{state: conditions.Waiting, reason: ReasonReconcileError, message: fmt.Sprintf("retrying: %v", err), keepObservedGeneration: true}
}

// evaluate concludes from the Deployment (as the API server returned it
// from the apply, so a roll just started is not mistaken for a finished
// one) and the keys Secret.
func evaluate(s *scope) outcome {
	e, d := s.exec, s.deployment
	if s.keysFound != nil && !*s.keysFound {
		return outcome{state: conditions.Waiting, reason: meta.SecretNotFoundReason, message: fmt.Sprintf(
			"Secret %s (spec.operatorKeys.secretRef) not found in namespace %s: create it, normally through an ExternalSecret; the executor Pods start once it exists",
			e.Spec.OperatorKeys.SecretRef.Name, e.Namespace)}
	}
	want := defaultReplicas
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation {
		return outcome{state: conditions.Progressing, reason: ReasonRollingOut, message: fmt.Sprintf(
			"rolling out Deployment %s (configuration %s)", d.Name, s.configHash)}
	}
	if c := deploymentCondition(d, appsv1.DeploymentProgressing); c != nil && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
		return stalled(ReasonRolloutStalled, fmt.Sprintf(
			"the rollout of Deployment %s stopped making progress (%s): look at its Pods with kubectl describe pods -l %s=%s",
			d.Name, c.Message, LabelName, e.Name))
	}
	if c := deploymentCondition(d, appsv1.DeploymentReplicaFailure); c != nil && c.Status == corev1.ConditionTrue {
		return outcome{state: conditions.Waiting, reason: ReasonReplicaFailure, message: fmt.Sprintf(
			"Deployment %s cannot create its Pods: %s; fix what it names (spec.serviceAccountName, a quota, a policy)", d.Name, c.Message)}
	}
	if st.UpdatedReplicas < want || st.AvailableReplicas < want || st.Replicas > want {
		return outcome{state: conditions.Progressing, reason: ReasonRollingOut, message: fmt.Sprintf(
			"rolling out: %d of %d Pods updated to configuration %s, %d available", st.UpdatedReplicas, want, s.configHash, st.AvailableReplicas)}
	}
	if want == 0 {
		return outcome{state: conditions.Ready, reason: ReasonAvailable, message: "scaled to zero replicas"}
	}
	return outcome{state: conditions.Ready, reason: ReasonAvailable, message: fmt.Sprintf(
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

// setStatus writes the replica counts, the configuration and the conditions.
func (r *Reconciler) setStatus(s *scope) {
	o := s.outcome
	if o.reason == "" {
		return
	}
	e := s.exec
	st := &e.Status
	if d := s.deployment; d != nil {
		st.Replicas, st.ReadyReplicas, st.AvailableReplicas = d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas
		st.ConfigHash = d.Spec.Template.Annotations[AnnotationConfigHash]
		st.ConfigMapName = ConfigMapName(e)
	}
	generation := e.Generation
	if o.keepObservedGeneration {
		generation = st.ObservedGeneration
	} else {
		st.ObservedGeneration = e.Generation
	}
	conditions.Set(e, generation, conditions.Summary{State: o.state, Reason: o.reason, Message: o.message})
}

// recordTransition emits events on changes only: a new configuration, a
// first Ready, a new reason to be stuck.
func (r *Reconciler) recordTransition(before, after *hourglassv1alpha1.HourglassExecutor, s *scope) {
	if s.outcome.reason == "" {
		return
	}
	if old, cur := before.Status.ConfigHash, after.Status.ConfigHash; old != "" && cur != "" && old != cur {
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, EventConfigChanged, "Rollout",
			"Configuration changed from %s to %s; rolling Deployment %s", old, cur, DeploymentName(after))
	}
	beforeReason, _ := conditions.ReadyMessage(before)
	switch {
	case s.outcome.state == conditions.Ready && !apimeta.IsStatusConditionTrue(before.Status.Conditions, meta.ReadyCondition):
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "Ready", "Reconcile", "%s", s.outcome.message)
	case (s.outcome.state == conditions.Stalled || s.outcome.reason == meta.SecretNotFoundReason) && beforeReason != s.outcome.reason:
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, s.outcome.reason, "Reconcile", "%s", s.outcome.message)
	}
}
