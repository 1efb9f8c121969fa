package performer

import (
	"k8s.io/apimachinery/pkg/types"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// written is the status this process last wrote for a Performer, and the
// resourceVersion it was written over. A reconcile that comes before the
// cache shows the write (a Pod event racing the Performer's) reads that
// older version: diffed against it, the same status would be written
// again, a write per Performer at every step. Until the cache catches up,
// the reconcile diffs against what it wrote instead. Only the gap is kept:
// the entry goes once the cache shows a newer version, so this is no state
// that must survive a restart (after one, the cache is simply read).
type written struct {
	over   string
	status hourglassv1alpha1.PerformerStatus
}

// statusAsWritten puts the status this process wrote into perf if the cache
// still shows the version it was written over.
func (r *Reconciler) statusAsWritten(key types.NamespacedName, perf *hourglassv1alpha1.Performer) {
	v, ok := r.written.Load(key)
	if !ok {
		return
	}
	w := v.(written)
	if w.over != perf.ResourceVersion {
		r.written.Delete(key)
		return
	}
	perf.Status = *w.status.DeepCopy()
}

// remember notes the status just written over the version read at readRV.
func (r *Reconciler) remember(key types.NamespacedName, readRV string, perf *hourglassv1alpha1.Performer) {
	if perf.ResourceVersion == readRV {
		return // nothing was written
	}
	r.written.Store(key, written{over: readRV, status: *perf.Status.DeepCopy()})
}
