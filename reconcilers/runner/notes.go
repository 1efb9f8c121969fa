package runner

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// notes are the notes this process wrote on one claim that the cache did
// not show yet, by annotation (nil: removed). They are laid over the
// cache's claim, so a reconcile that reads the cache before it shows the
// last write neither decides again (an idle runner's clock would start
// later) nor writes the same note twice.
type notes struct {
	mu     sync.Mutex
	values map[string]*string
}

// remember keeps what a patch wrote on c.
func (r *Reconciler) remember(c *hypervisorv1alpha1.MachineClaim, set map[string]any) {
	n, _ := r.written.LoadOrStore(c, &notes{})
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.values == nil {
		n.values = map[string]*string{}
	}
	for key, v := range set {
		if s, ok := v.(string); ok {
			n.values[key] = &s
		} else {
			n.values[key] = nil
		}
	}
	for key, v := range set {
		if v == nil {
			delete(c.Annotations, key)
			continue
		}
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[key] = v.(string)
	}
}

// view is a copy of the cache's claim c with the notes written since laid
// over it; notes the cache shows are forgotten.
func (r *Reconciler) view(c *hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.MachineClaim {
	c = c.DeepCopy()
	n, ok := r.written.Load(c)
	if !ok {
		return c
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for key, v := range n.values {
		have, present := c.Annotations[key]
		switch {
		case v == nil && !present, v != nil && present && have == *v:
			delete(n.values, key) // the cache shows it
		case v == nil:
			delete(c.Annotations, key)
		default:
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[key] = *v
		}
	}
	return c
}

// notOwnNotesOnly passes every claim event but an update that changed
// nothing but the notes this reconciler writes itself: it wrote them after
// deciding with them. A retire request from the pool passes.
func notOwnNotesOnly() predicate.Predicate {
	return runnerstate.UnlessOnlyAnnotations(func(key string) bool { return slices.Contains(runnerstate.RunnerNoteKeys, key) })
}

// metav1LabelExists selects objects that carry label key.
func metav1LabelExists(key string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpExists}}}
}
