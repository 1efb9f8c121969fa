package executor

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions/conditionstest"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Every state an executor can be in becomes the right kstatus summary, the
// status fields follow the Deployment, and the conditions Set from the
// summary keep the kstatus invariants.
func TestComputeStatus(t *testing.T) {
	found, missing := true, false
	dep := func(gen, observed int64, replicas, updated, available int32, conds ...appsv1.DeploymentCondition) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "avs-executor", Generation: gen}}
		d.Spec.Replicas = &replicas
		d.Spec.Template.Annotations = map[string]string{AnnotationConfigHash: "abc"}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated,
			ReadyReplicas: available, AvailableReplicas: available, Conditions: conds}
		return d
	}
	for _, tc := range []struct {
		name     string
		d        *appsv1.Deployment
		keys     *bool
		err      error
		deleting bool
		state    conditions.State
		reason   string
		want     string
	}{
		{name: "available", d: dep(2, 2, 2, 2, 2), keys: &found, state: conditions.Ready, reason: ReasonAvailable, want: "2 of 2 executors available"},
		{name: "not yet observed", d: dep(3, 2, 2, 2, 2), keys: &found, state: conditions.Progressing, reason: ReasonRollingOut, want: "rolling out"},
		{name: "rolling", d: dep(2, 2, 2, 1, 2), keys: &found, state: conditions.Progressing, reason: ReasonRollingOut, want: "1 of 2 Pods updated"},
		{name: "keys missing", d: dep(2, 2, 2, 2, 0), keys: &missing, state: conditions.Waiting, reason: meta.SecretNotFoundReason,
			want: "Secret keys (spec.operatorKeys.secretRef) not found in namespace avs: create it"},
		{name: "deadline", d: dep(2, 2, 1, 0, 0, appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
			Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "avs-executor-5d" has timed out progressing.`}),
			keys: &found, state: conditions.Stalled, reason: ReasonRolloutStalled, want: "timed out progressing"},
		{name: "replica failure", d: dep(2, 2, 1, 0, 0, appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue,
			Reason: "FailedCreate", Message: `pods "avs-executor-5d-" is forbidden: error looking up service account avs/executor: serviceaccount "executor" not found`}),
			keys: &found, state: conditions.Waiting, reason: ReasonReplicaFailure, want: "serviceaccount \"executor\" not found"},
		{name: "scaled to zero", d: dep(2, 2, 0, 0, 0), keys: &found, state: conditions.Ready, reason: ReasonAvailable, want: "scaled to zero"},
		{name: "invalid spec", err: skeleton.Stalled(meta.InvalidSpecReason, "spec.chains: at least one chain"),
			state: conditions.Stalled, reason: meta.InvalidSpecReason, want: "spec.chains"},
		{name: "name taken", err: skeleton.Stalled(ReasonConflict, "ConfigMap avs-executor-config exists and is not managed by this HourglassExecutor"),
			state: conditions.Stalled, reason: ReasonConflict, want: "is not managed by this HourglassExecutor"},
		{name: "API error", d: dep(2, 2, 2, 2, 2), err: errors.New("the server is currently unable to handle the request"),
			state: conditions.Waiting, reason: ReasonReconcileError, want: "retrying: the server is currently unable"},
		{name: "deleting", deleting: true, state: conditions.Progressing, reason: meta.DeletingReason, want: "is being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testExecutor()
			e.Namespace, e.Generation = "avs", 2
			if tc.deleting {
				now := metav1.Now()
				e.DeletionTimestamp = &now
			}
			got := computeStatus(&scope{exec: e, deployment: tc.d, keysFound: tc.keys, configHash: "abc"}, tc.err)
			if got.State != tc.state || got.Reason != tc.reason || !strings.Contains(got.Message, tc.want) {
				t.Errorf("got %v/%s %q; want %v/%s containing %q", got.State, got.Reason, got.Message, tc.state, tc.reason, tc.want)
			}
			if tc.d != nil && (e.Status.ConfigHash != "abc" || e.Status.ConfigMapName != ConfigMapName(e) || e.Status.AvailableReplicas != tc.d.Status.AvailableReplicas) {
				t.Errorf("status fields not taken from the Deployment: %+v", e.Status)
			}
			// As the finalize-status step would: conditions from the
			// summary, observedGeneration stamped on success.
			conditionstest.CheckSummary(t, e, got, tc.err == nil)
		})
	}
}
