package conditions

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

type checked struct {
	obj
	gen, observed int64
	deleted       *metav1.Time
}

func (c *checked) GetDeletionTimestamp() *metav1.Time { return c.deleted }

func (c *checked) GetGeneration() int64          { return c.gen }
func (c *checked) GetObservedGeneration() int64  { return c.observed }
func (c *checked) SetObservedGeneration(g int64) { c.observed = g }

func cond(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, ObservedGeneration: 1}
}

// Every broken shape is caught, and every shape Set produces passes.
func TestViolations(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conds      []metav1.Condition
		observed   int64
		reconciled bool
		want       string
	}{
		{"ready and stalled", []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, "R"), cond(meta.StalledCondition, metav1.ConditionTrue, "S")}, 1, true, "Ready and Stalled"},
		{"reconciling while ready", []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, "R"), cond(meta.ReconcilingCondition, metav1.ConditionTrue, "P")}, 1, true, "Reconciling is True while Ready"},
		{"reconciling and stalled", []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionFalse, "R"), cond(meta.ReconcilingCondition, metav1.ConditionTrue, "P"), cond(meta.StalledCondition, metav1.ConditionTrue, "S")}, 1, true, "Reconciling and Stalled"},
		{"no reason", []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionFalse, "")}, 1, true, "has no reason"},
		{"bad status", []metav1.Condition{cond(meta.ReadyCondition, "Maybe", "R")}, 1, true, `status "Maybe"`},
		{"observed generation behind", []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, "R")}, 0, true, "behind generation"},
		{"no ready", nil, 1, true, "no Ready condition"},
		{"behind after a failed reconcile is fine", []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionFalse, "R")}, 0, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &checked{obj: obj{conds: tc.conds}, gen: 1, observed: tc.observed}
			got := strings.Join(Violations(c, tc.reconciled), "; ")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("violations = %q, want one containing %q", got, tc.want)
			}
		})
	}
	// Behind while being deleted is fine: kstatus says Terminating.
	deleting := &checked{obj: obj{conds: []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, "R")}}, gen: 2, observed: 1, deleted: &metav1.Time{}}
	if v := Violations(deleting, true); len(v) > 0 {
		t.Errorf("an object being deleted, observed one generation behind: %v", v)
	}
	for _, s := range []State{Ready, Progressing, Waiting, Stalled, Finished} {
		c := &checked{gen: 4, observed: 4}
		Set(c, 4, Summary{State: s, Reason: "R", Message: "m"})
		if v := Violations(c, true); len(v) > 0 {
			t.Errorf("Set(%v) gives %v", s, v)
		}
	}
}
