package skeleton

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// WrittenStatus is the status this process last wrote for each object, and
// the resourceVersion it was written over. A reconcile that comes before the
// cache shows the write (another object's event racing this one's) reads
// the older version: diffed against it, the same status would be written
// again, a write per object at every step. Until the cache catches up, the
// Driver diffs against what was written instead. Only the gap is kept: the
// entry goes once the cache shows a newer version, so nothing here must
// survive a restart (after one, the cache is simply read).
type WrittenStatus[T Object] struct {
	m sync.Map // types.NamespacedName → written[T]
}

type written[T Object] struct {
	over string
	// status is the object as written; only its status is used.
	status T
}

// overlay puts the status this process wrote into obj if the cache still
// shows the version it was written over.
func (w *WrittenStatus[T]) overlay(key types.NamespacedName, obj T, copyStatus func(dst, src T)) {
	v, ok := w.m.Load(key)
	if !ok {
		return
	}
	e := v.(written[T])
	if e.over != obj.GetResourceVersion() {
		w.m.Delete(key)
		return
	}
	copyStatus(obj, e.status)
}

// remember notes the status of obj, just written over the version read at
// readRV.
func (w *WrittenStatus[T]) remember(key types.NamespacedName, readRV string, obj T) {
	if obj.GetResourceVersion() == readRV {
		return // nothing was written
	}
	w.m.Store(key, written[T]{over: readRV, status: obj.DeepCopyObject().(T)})
}

// Forget drops the entry of the object named key.
func (w *WrittenStatus[T]) Forget(key types.NamespacedName) { w.m.Delete(key) }
