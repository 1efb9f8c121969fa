package skeleton

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// WrittenStatus is the status this process last wrote for each object, and
// the resourceVersions it was written over. A reconcile that comes before
// the cache shows the write (another object's event racing this one's)
// reads an older version: diffed against it, the same status would be
// written again, a write per object at every step, and a transition the
// kind reports or counts would be seen twice. Until the cache catches up,
// the Driver diffs against what was written instead.
//
// Writes chain: a reconcile that read an older version overlaid with what
// was written writes over that older version again, and the cache may then
// show any version of the chain — the first write's before the second's.
// Each version of the chain is older than the last write, so every one of
// them is overlaid; the entry goes once the cache shows the last write, or
// a version not in the chain (somebody else's write: the cache is then
// read as it is). Nothing here must survive a restart (after one, the
// cache is simply read).
type WrittenStatus[T Object] struct {
	m sync.Map // types.NamespacedName → written[T]
}

// maxChain bounds the versions an entry remembers: a cache more writes
// behind than that is read as it is.
const maxChain = 8

type written[T Object] struct {
	// chain holds the versions the writes were made over, oldest first.
	chain []string
	// latest is the version the last write made.
	latest string
	// status holds the status as last written, in an otherwise empty
	// object: an entry stays until the object's next reconcile, so for an
	// idle object for ever, and the written object's metadata (its
	// managedFields above all, which the patch response carries) and spec
	// would be kept with it for nothing.
	status T
}

// overlay puts the status this process wrote into obj if the cache shows a
// version older than that write, and reports whether it did.
func (w *WrittenStatus[T]) overlay(key types.NamespacedName, obj T, copyStatus func(dst, src T)) bool {
	v, ok := w.m.Load(key)
	if !ok {
		return false
	}
	e := v.(written[T])
	if !slices.Contains(e.chain, obj.GetResourceVersion()) {
		w.m.Delete(key) // caught up, or somebody else wrote
		return false
	}
	copyStatus(obj, e.status)
	return true
}

// remember notes the status of obj, just written over the version read at
// readRV; overlaid says the read was overlaid with an earlier write, which
// this one continues. checkpoints are the versions the reconcile wrote on
// the way (StatusPatch.Checkpoint): older than obj's, the cache may show
// any of them next. statusOf returns obj's status in an otherwise empty
// object, called only when something was written.
func (w *WrittenStatus[T]) remember(key types.NamespacedName, readRV string, overlaid bool, obj T, statusOf func(T) T, checkpoints ...string) {
	latest := obj.GetResourceVersion()
	if latest == readRV {
		return // nothing was written
	}
	var chain []string
	if v, ok := w.m.Load(key); ok && overlaid {
		e := v.(written[T])
		chain = append(chain, e.chain...)
		chain = append(chain, e.latest)
	}
	for _, rv := range append([]string{readRV}, checkpoints...) {
		if rv != latest && !slices.Contains(chain, rv) {
			chain = append(chain, rv)
		}
	}
	if len(chain) > maxChain {
		chain = chain[len(chain)-maxChain:]
	}
	w.m.Store(key, written[T]{chain: chain, latest: latest, status: statusOf(obj)})
}

// Forget drops the entry of the object named key.
func (w *WrittenStatus[T]) Forget(key types.NamespacedName) { w.m.Delete(key) }
