package conditions

import (
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

type obj struct{ conds []metav1.Condition }

func (o *obj) GetConditions() []metav1.Condition  { return o.conds }
func (o *obj) SetConditions(c []metav1.Condition) { o.conds = c }

func status(o *obj, t string) metav1.ConditionStatus {
	if c := apimeta.FindStatusCondition(o.conds, t); c != nil {
		return c.Status
	}
	return "absent"
}

// Whatever sequence of states a reconciler goes through, the three
// conditions stay consistent: never Ready with Reconciling or Stalled, never
// Reconciling and Stalled together.
func TestKstatusInvariants(t *testing.T) {
	o := &obj{}
	want := map[State][3]metav1.ConditionStatus{
		Ready:       {metav1.ConditionTrue, "absent", "absent"},
		Progressing: {metav1.ConditionFalse, metav1.ConditionTrue, "absent"},
		Waiting:     {metav1.ConditionFalse, "absent", "absent"},
		Stalled:     {metav1.ConditionFalse, "absent", metav1.ConditionTrue},
		Finished:    {metav1.ConditionTrue, "absent", "absent"},
	}
	for _, seq := range [][]State{{Progressing, Ready, Stalled, Progressing, Waiting, Ready, Finished}, {Stalled, Ready}, {Ready, Progressing}} {
		for i, s := range seq {
			Set(o, int64(i+1), Summary{State: s, Reason: "R", Message: "m"})
			got := [3]metav1.ConditionStatus{status(o, meta.ReadyCondition), status(o, meta.ReconcilingCondition), status(o, meta.StalledCondition)}
			if got != want[s] {
				t.Fatalf("after %v: Ready/Reconciling/Stalled = %v, want %v", s, got, want[s])
			}
			for _, c := range o.conds {
				if c.ObservedGeneration != int64(i+1) {
					t.Errorf("condition %s has observedGeneration %d, want %d", c.Type, c.ObservedGeneration, i+1)
				}
			}
		}
	}
	if !IsReady(&obj{conds: []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, ObservedGeneration: 3}}}, 3) {
		t.Error("IsReady")
	}
}
