package performer

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions/conditionstest"
)

// Each Pod trouble becomes the right kstatus state, with a message that
// does not change with the kubelet's back-off counters.
func TestComputeStatusFromPods(t *testing.T) {
	p := perf()
	waiting := func(reason, msg string) *corev1.Pod {
		pod := testPod("cur", "b", running, time.Now())
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "performer", Image: "img:v1",
			State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}},
		}}
		return pod
	}
	unschedulable := testPod("cur", "b", pending, time.Now())
	unschedulable.Spec.NodeSelector = map[string]string{"intel.feature.node.kubernetes.io/sgx": "true"}
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}}
	// Every step of a normal start reads the same, so none costs a status write.
	bound := testPod("cur", "b", pending, time.Now())
	bound.Spec.NodeName = "node-1"
	longUnschedulable := unschedulable.DeepCopy()
	longUnschedulable.CreationTimestamp = metav1.NewTime(time.Now().Add(-DefaultPendingTimeout - time.Minute))
	// Made long ago, bound a moment ago: the bound counts from the binding.
	boundLate := longUnschedulable.DeepCopy()
	boundLate.Spec.NodeName = "node-1"
	boundLate.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	for _, tc := range []struct {
		name    string
		current *corev1.Pod
		serving *corev1.Pod
		phase   hourglassv1alpha1.PerformerPhase
		state   conditions.State
		reason  string
		want    string
	}{
		{"serving", testPod("cur", "b", ready, time.Now()), nil, hourglassv1alpha1.PerformerRunning, conditions.Ready, ReasonServing,
			"version v1.0.0 serves at performer-avs.ns.svc.cluster.local:8080"},
		{"starting", testPod("cur", "b", pending, time.Now()), nil, hourglassv1alpha1.PerformerPending, conditions.Progressing, ReasonPodStarting, "Pod cur is starting"},
		{"bound, starting", bound, nil, hourglassv1alpha1.PerformerPending, conditions.Progressing, ReasonPodStarting, "Pod cur is starting"},
		{"running, not Ready", testPod("cur", "b", running, time.Now()), nil, hourglassv1alpha1.PerformerPending, conditions.Progressing, ReasonPodStarting, "Pod cur is starting"},
		{"unschedulable", unschedulable, nil, hourglassv1alpha1.PerformerPending, conditions.Waiting, ReasonUnschedulable,
			"needs a node with intel.feature.node.kubernetes.io/sgx=true, and the Performer is marked Stalled if none fits within 5m0s"},
		{"unschedulable past the bound", longUnschedulable, nil, hourglassv1alpha1.PerformerFailed, conditions.Stalled, ReasonPendingTimeout,
			"waited for a node for longer than 5m0s (Unschedulable: 0/3 nodes are available"},
		{"upgrade unschedulable past the bound", longUnschedulable, testPod("old", "a", ready, time.Now()), hourglassv1alpha1.PerformerUpgrading, conditions.Stalled, ReasonPendingTimeout,
			"the upgrade to version v1.0.0 is stuck: Pod cur has waited for a node for longer than 5m0s"},
		{"bound, Pending past the bound since made", boundLate, nil, hourglassv1alpha1.PerformerPending, conditions.Progressing, ReasonPodStarting, "Pod cur is starting"},
		{"image", waiting("ImagePullBackOff", "Back-off pulling image"), nil, hourglassv1alpha1.PerformerFailed, conditions.Stalled, ReasonImagePullFailed, "check spec.image, spec.version"},
		{"missing key", waiting("CreateContainerConfigError", `secret "avs-secrets" not found`), nil, hourglassv1alpha1.PerformerFailed, conditions.Stalled, ReasonContainerConfig,
			"check that the Secrets and ConfigMaps in spec.config.env, environmentFrom and envFrom exist"},
		{"root image under the restricted profile", waiting("CreateContainerConfigError", "container has runAsNonRoot and image will run as root (pod: \"x\", container: performer)"), nil,
			hourglassv1alpha1.PerformerFailed, conditions.Stalled, ReasonContainerConfig, "or set spec.podSecurityProfile: Baseline"},
		{"crash", waiting("CrashLoopBackOff", "back-off 40s restarting"), nil, hourglassv1alpha1.PerformerFailed, conditions.Stalled, ReasonCrashLoop, "exit code 2"},
		{"upgrading", testPod("cur", "b", running, time.Now()), testPod("old", "a", ready, time.Now()), hourglassv1alpha1.PerformerUpgrading,
			conditions.Progressing, ReasonUpgrading, "version v-a keeps serving"},
		{"upgrade stuck", waiting("ErrImagePull", "not found"), testPod("old", "a", ready, time.Now()), hourglassv1alpha1.PerformerUpgrading,
			conditions.Stalled, ReasonImagePullFailed, "the upgrade to version v1.0.0 is stuck"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scope{perf: p.DeepCopy(), now: time.Now(), current: tc.current, serving: tc.serving, pendingTimeout: DefaultPendingTimeout}
			if tc.serving == nil && tc.state == conditions.Ready {
				s.serving = tc.current
			}
			o := computeStatus(s, nil)
			if phase := s.perf.Status.Phase; phase != tc.phase || o.State != tc.state || o.Reason != tc.reason || !strings.Contains(o.Message, tc.want) {
				t.Errorf("got %s/%v/%s %q; want %s/%v/%s containing %q", phase, o.State, o.Reason, o.Message, tc.phase, tc.state, tc.reason, tc.want)
			}
			if strings.Contains(o.Message, "back-off") {
				t.Errorf("the message carries the kubelet's back-off: %q", o.Message)
			}
			conditionstest.CheckSummary(t, s.perf, o, true)
		})
	}
}

// What stops a roll short, an error and a deletion each have their phase,
// kstatus state and status fields.
func TestComputeStatus(t *testing.T) {
	oldReady := testPod("old", "a", ready, time.Now())
	oldReady.Spec.NodeName = "node-1"
	cur := testPod("cur", "b", running, time.Now())
	rejected := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "performer-avs-b",
		errors.New(`pod rejected: RuntimeClass "tdx" not found`))
	for _, tc := range []struct {
		name     string
		scope    scope
		err      error
		deleting bool
		// before is the phase the status had.
		before  hourglassv1alpha1.PerformerPhase
		phase   hourglassv1alpha1.PerformerPhase
		state   conditions.State
		reason  string
		want    string
		podName string
	}{
		{name: "invalid spec", scope: scope{invalid: &specError{reason: ReasonInvalidSpec, message: "spec.hardwareRequirements.customLabels: bad key"}},
			phase: hourglassv1alpha1.PerformerFailed, state: conditions.Stalled, reason: ReasonInvalidSpec, want: "customLabels"},
		{name: "invalid spec while an old Pod serves", scope: scope{serving: oldReady, invalid: &specError{reason: ReasonNoTEEMapping, message: "no teeType sev in the placement table"}},
			phase: hourglassv1alpha1.PerformerUpgrading, state: conditions.Stalled, reason: ReasonNoTEEMapping, want: "Pod old (version v-a) keeps serving", podName: "old"},
		{name: "Pod made, cache behind", scope: scope{starting: cur},
			phase: hourglassv1alpha1.PerformerPending, state: conditions.Progressing, reason: ReasonPodStarting, want: "Pod cur is starting", podName: "cur"},
		{name: "Pods made before the managed-by label, being adopted", scope: scope{adopting: "legacy-1"}, before: hourglassv1alpha1.PerformerRunning,
			phase: hourglassv1alpha1.PerformerRunning, state: conditions.Progressing, reason: ReasonAdoptingPods, want: "show Pod legacy-1", podName: "previous"},
		{name: "Pod rejected", scope: scope{rejected: rejected},
			phase: hourglassv1alpha1.PerformerFailed, state: conditions.Stalled, reason: ReasonPodRejected, want: `RuntimeClass "tdx" not found`},
		{name: "Service name taken", scope: scope{current: cur, serviceConflict: &specError{reason: ReasonServiceConflict, message: "Service performer-avs exists and is not managed by this Performer"}},
			phase: hourglassv1alpha1.PerformerFailed, state: conditions.Stalled, reason: ReasonServiceConflict, want: "not managed by this Performer", podName: "cur"},
		{name: "API error keeps the phase", scope: scope{current: cur}, err: errors.New("connection refused"), before: hourglassv1alpha1.PerformerRunning,
			phase: hourglassv1alpha1.PerformerRunning, state: conditions.Waiting, reason: ReasonReconcileError, want: "retrying: connection refused", podName: "previous"},
		{name: "API error on a new Performer", err: errors.New("connection refused"),
			phase: hourglassv1alpha1.PerformerPending, state: conditions.Waiting, reason: ReasonReconcileError, want: "retrying", podName: "previous"},
		{name: "deleting", deleting: true, before: hourglassv1alpha1.PerformerRunning,
			phase: hourglassv1alpha1.PerformerTerminating, state: conditions.Progressing, reason: meta.DeletingReason, want: "is being deleted", podName: "previous"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.scope
			s.perf = perf()
			s.perf.Generation = 3
			s.perf.Status.Phase, s.perf.Status.PodName = tc.before, "previous"
			s.pendingTimeout = DefaultPendingTimeout
			if tc.deleting {
				now := metav1.Now()
				s.perf.DeletionTimestamp = &now
			}
			o := computeStatus(&s, tc.err)
			st := s.perf.Status
			if st.Phase != tc.phase || o.State != tc.state || o.Reason != tc.reason || !strings.Contains(o.Message, tc.want) {
				t.Errorf("got %s/%v/%s %q; want %s/%v/%s containing %q", st.Phase, o.State, o.Reason, o.Message, tc.phase, tc.state, tc.reason, tc.want)
			}
			if st.PodName != tc.podName {
				t.Errorf("status.podName = %q, want %q", st.PodName, tc.podName)
			}
			conditionstest.CheckSummary(t, s.perf, o, tc.err == nil)
		})
	}

	// The Service fields appear once the Service is ours.
	s := &scope{perf: perf(), current: cur, serviceReady: true, pendingTimeout: DefaultPendingTimeout}
	computeStatus(s, nil)
	if st := s.perf.Status; st.ServiceName != "performer-avs" || st.GRPCEndpoint != "performer-avs.ns.svc.cluster.local:8080" {
		t.Errorf("service fields: %+v", st)
	}
}
