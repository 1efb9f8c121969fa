package performer

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
