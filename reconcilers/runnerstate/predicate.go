package runnerstate

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// UnlessOnlyAnnotations passes every claim event but an update that
// changed nothing but annotations ignored says to ignore (and what every
// write changes: resourceVersion, managedFields). A reconciler uses it so
// that the notes it wrote after deciding with them do not wake it again.
func UnlessOnlyAnnotations(ignored func(key string) bool) predicate.Predicate {
	without := func(c *hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.MachineClaim {
		c = c.DeepCopy()
		c.ResourceVersion, c.ManagedFields = "", nil
		for key := range c.Annotations {
			if ignored(key) {
				delete(c.Annotations, key)
			}
		}
		if len(c.Annotations) == 0 {
			c.Annotations = nil
		}
		return c
	}
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok := e.ObjectOld.(*hypervisorv1alpha1.MachineClaim)
		after, ok2 := e.ObjectNew.(*hypervisorv1alpha1.MachineClaim)
		if !ok || !ok2 {
			return true
		}
		return !equality.Semantic.DeepEqual(without(before), without(after))
	}}
}
