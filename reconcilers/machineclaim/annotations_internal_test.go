package machineclaim

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// An owner's notes on its claim (a pool's about its runner) wake no claim
// reconcile; any other annotation change (a nudge) does.
func TestOwnersNotesWakeNoClaimReconcile(t *testing.T) {
	with := func(annotations map[string]string) *hypervisorv1alpha1.MachineClaim {
		return &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: annotations}}
	}
	note := hypervisorv1alpha1.NotesAnnotationPrefix + "runner-idle-since"
	for _, tc := range []struct {
		name     string
		old, new map[string]string
		want     bool
	}{
		{"a note added", nil, map[string]string{note: "t1"}, false},
		{"a note changed", map[string]string{note: "t1"}, map[string]string{note: "t2"}, false},
		{"a note removed", map[string]string{note: "t1", "a": "b"}, map[string]string{"a": "b"}, false},
		{"a nudge", map[string]string{note: "t1"}, map[string]string{note: "t1", "reconcile.hyperfleet.io/requested-at": "now"}, true},
	} {
		if got := annotationsChanged.Update(event.UpdateEvent{ObjectOld: with(tc.old), ObjectNew: with(tc.new)}); got != tc.want {
			t.Errorf("%s: wakes %v, want %v", tc.name, got, tc.want)
		}
	}
}
