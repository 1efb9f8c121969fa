package conditions

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// Checked is what Violations reads: conditions, observedGeneration and
// whether the object is being deleted.
type Checked interface {
	meta.ConditionsAccessor
	meta.ObservedGenerationAccessor
	GetGeneration() int64
	GetDeletionTimestamp() *metav1.Time
}

// Violations lists how obj breaks the kstatus contract that Argo CD and
// Flux rely on (in the spirit of fluxcd/pkg runtime/conditions/check):
//   - Ready and Stalled both True;
//   - Reconciling True while Ready is True;
//   - Reconciling and Stalled both True;
//   - a condition without a reason, or with an unknown status;
//   - a condition's observedGeneration ahead of the object's generation;
//   - after a successful reconcile (reconciled), status.observedGeneration
//     behind the generation (unless the object is being deleted: kstatus
//     reads deletionTimestamp first and says Terminating, and deletion
//     bumps the generation of an object about to go), or no Ready
//     condition at all.
func Violations(obj Checked, reconciled bool) []string {
	var out []string
	conds := obj.GetConditions()
	gen := obj.GetGeneration()
	isTrue := func(t string) bool { return apimeta.IsStatusConditionTrue(conds, t) }
	if isTrue(meta.ReadyCondition) && isTrue(meta.StalledCondition) {
		out = append(out, "Ready and Stalled are both True")
	}
	if isTrue(meta.ReadyCondition) && isTrue(meta.ReconcilingCondition) {
		out = append(out, "Reconciling is True while Ready is True")
	}
	if isTrue(meta.ReconcilingCondition) && isTrue(meta.StalledCondition) {
		out = append(out, "Reconciling and Stalled are both True")
	}
	for _, c := range conds {
		if c.Reason == "" {
			out = append(out, fmt.Sprintf("condition %s has no reason", c.Type))
		}
		switch c.Status {
		case metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown:
		default:
			out = append(out, fmt.Sprintf("condition %s has status %q", c.Type, c.Status))
		}
		if c.ObservedGeneration > gen {
			out = append(out, fmt.Sprintf("condition %s observed generation %d, ahead of the object's %d", c.Type, c.ObservedGeneration, gen))
		}
	}
	if reconciled {
		if og := obj.GetObservedGeneration(); og < gen && obj.GetDeletionTimestamp() == nil {
			out = append(out, fmt.Sprintf("status.observedGeneration %d is behind generation %d after a successful reconcile", og, gen))
		}
		if apimeta.FindStatusCondition(conds, meta.ReadyCondition) == nil {
			out = append(out, "no Ready condition after a successful reconcile")
		}
	}
	return out
}
