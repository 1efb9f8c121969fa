package performer

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

type podState int

const (
	pending podState = iota
	running          // Running, not Ready
	ready
	failed
)

func testPod(name, hash string, st podState, created time.Time) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{LabelTemplateHash: hash},
		Annotations:       map[string]string{AnnotationVersion: "v-" + hash},
		CreationTimestamp: metav1.NewTime(created),
	}}
	switch st {
	case pending:
		pod.Status.Phase = corev1.PodPending
	case running:
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	case ready:
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	case failed:
		pod.Status.Phase = corev1.PodFailed
	}
	return pod
}

// The Service moves to the new revision only once its Pod is Ready, and the
// revision it routes to keeps its Pods until then, even through a
// readiness blip.
func TestChooseRoute(t *testing.T) {
	t0 := time.Now()
	newPending := testPod("new", "b", pending, t0)
	newReady := testPod("new", "b", ready, t0)
	oldReady := testPod("old", "a", ready, t0.Add(-time.Hour))
	oldBlip := testPod("old", "a", running, t0.Add(-time.Hour))
	oldFailed := testPod("old", "a", failed, t0.Add(-time.Hour))
	otherReady := testPod("other", "c", ready, t0.Add(-2*time.Hour))
	// A Pod the original operator made carries no revision label.
	legacy := testPod("performer-x", "", ready, t0.Add(-time.Hour))
	delete(legacy.Labels, LabelTemplateHash)
	for _, tc := range []struct {
		name        string
		current     *corev1.Pod
		old         []*corev1.Pod
		routed      string
		wantRoute   string
		wantServing string
		wantKeep    []string
	}{
		{"fresh performer routes to the desired revision", newPending, nil, "", "b", "", nil},
		{"new Pod Ready takes over", newReady, []*corev1.Pod{oldReady}, "a", "b", "new", nil},
		{"old keeps serving while the new starts", newPending, []*corev1.Pod{oldReady}, "a", "a", "old", []string{"old"}},
		{"a readiness blip of the old Pod does not cut it loose", newPending, []*corev1.Pod{oldBlip}, "a", "a", "", []string{"old"}},
		{"a failed old Pod is let go", newPending, []*corev1.Pod{oldFailed}, "a", "b", "", nil},
		{"another Ready revision serves if the routed one is gone", newPending, []*corev1.Pod{otherReady}, "a", "c", "other", []string{"other"}},
		{"the original operator's Pod serves until ours is Ready", newPending, []*corev1.Pod{legacy}, "", "", "performer-x", []string{"performer-x"}},
		{"and then goes", newReady, []*corev1.Pod{legacy}, "", "b", "new", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			route, serving, keep := chooseRoute(tc.current, tc.old, tc.routed, "b")
			name := ""
			if serving != nil {
				name = serving.Name
			}
			var kept []string
			for _, p := range tc.old {
				if keep[p] {
					kept = append(kept, p.Name)
				}
			}
			if route != tc.wantRoute || name != tc.wantServing || strings.Join(kept, ",") != strings.Join(tc.wantKeep, ",") {
				t.Errorf("route %q serving %q keep %v; want %q %q %v", route, name, kept, tc.wantRoute, tc.wantServing, tc.wantKeep)
			}
		})
	}
}

// Each Pod trouble becomes the right kstatus state, with a message that
// does not change with the kubelet's back-off counters.
func TestEvaluate(t *testing.T) {
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
		{"starting", testPod("cur", "b", pending, time.Now()), nil, hourglassv1alpha1.PerformerPending, conditions.Progressing, ReasonPodStarting, "waiting to be scheduled"},
		{"unschedulable", unschedulable, nil, hourglassv1alpha1.PerformerPending, conditions.Waiting, ReasonUnschedulable,
			"needs a node with intel.feature.node.kubernetes.io/sgx=true, and is replaced if still Pending after 5m0s"},
		{"image", waiting("ImagePullBackOff", "Back-off pulling image"), nil, hourglassv1alpha1.PerformerFailed, conditions.Stalled, ReasonImagePullFailed, "check spec.image, spec.version"},
		{"crash", waiting("CrashLoopBackOff", "back-off 40s restarting"), nil, hourglassv1alpha1.PerformerFailed, conditions.Stalled, ReasonCrashLoop, "exit code 2"},
		{"upgrading", testPod("cur", "b", running, time.Now()), testPod("old", "a", ready, time.Now()), hourglassv1alpha1.PerformerUpgrading,
			conditions.Progressing, ReasonUpgrading, "version v-a keeps serving"},
		{"upgrade stuck", waiting("ErrImagePull", "not found"), testPod("old", "a", ready, time.Now()), hourglassv1alpha1.PerformerUpgrading,
			conditions.Stalled, ReasonImagePullFailed, "the upgrade to version v1.0.0 is stuck"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scope{perf: p, current: tc.current, serving: tc.serving}
			if tc.serving == nil && tc.state == conditions.Ready {
				s.serving = tc.current
			}
			o := evaluate(s, DefaultPendingTimeout, "")
			if o.phase != tc.phase || o.state != tc.state || o.reason != tc.reason || !strings.Contains(o.message, tc.want) {
				t.Errorf("got %s/%v/%s %q; want %s/%v/%s containing %q", o.phase, o.state, o.reason, o.message, tc.phase, tc.state, tc.reason, tc.want)
			}
			if strings.Contains(o.message, "back-off") {
				t.Errorf("the message carries the kubelet's back-off: %q", o.message)
			}
		})
	}
}
