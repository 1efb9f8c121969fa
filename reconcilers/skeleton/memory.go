package skeleton

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Memory is what a reconciler keeps of each object between reconciles, in
// this process only (a backoff, a hash already announced, a check already
// done): nothing that must survive a restart. It is keyed by the object's
// name, so the Driver can forget an object it finds gone (a NotFound
// carries no UID), and each entry carries the UID it was stored for, so an
// object deleted and made again under the same name starts afresh. Give it
// to the driver in Kind.Memory.
type Memory[V any] struct {
	// Entries are pointers so that LoadOrStore can replace an earlier
	// object's entry with CompareAndSwap whatever V is: a pointer is always
	// comparable.
	m sync.Map // types.NamespacedName → *remembered[V]
}

type remembered[V any] struct {
	uid   types.UID
	value V
}

// Load returns what was stored for obj, if it was stored for this very
// object (same UID).
func (m *Memory[V]) Load(obj client.Object) (V, bool) {
	v, ok := m.m.Load(client.ObjectKeyFromObject(obj))
	if !ok {
		var zero V
		return zero, false
	}
	r := v.(*remembered[V])
	if r.uid != obj.GetUID() {
		var zero V
		return zero, false
	}
	return r.value, true
}

// LoadOrStore returns what was stored for obj if it was stored for this
// very object (loaded); otherwise it stores value for obj, replacing what
// an earlier object of the same name left, and returns it. Two callers
// racing on one object get the same value.
func (m *Memory[V]) LoadOrStore(obj client.Object, value V) (actual V, loaded bool) {
	key := client.ObjectKeyFromObject(obj)
	fresh := &remembered[V]{uid: obj.GetUID(), value: value}
	for {
		v, ok := m.m.LoadOrStore(key, fresh)
		if !ok {
			return value, false
		}
		r := v.(*remembered[V])
		if r.uid == obj.GetUID() {
			return r.value, true
		}
		// An earlier object's: replace it, unless another caller just did
		// (then look again, and find that caller's value).
		if m.m.CompareAndSwap(key, v, fresh) {
			return value, false
		}
	}
}

// Store remembers value for obj.
func (m *Memory[V]) Store(obj client.Object, value V) {
	m.m.Store(client.ObjectKeyFromObject(obj), &remembered[V]{uid: obj.GetUID(), value: value})
}

// Swap remembers value for obj and returns what was stored for it before.
func (m *Memory[V]) Swap(obj client.Object, value V) (previous V, loaded bool) {
	v, ok := m.m.Swap(client.ObjectKeyFromObject(obj), &remembered[V]{uid: obj.GetUID(), value: value})
	if !ok {
		return previous, false
	}
	r := v.(*remembered[V])
	if r.uid != obj.GetUID() {
		return previous, false
	}
	return r.value, true
}

// Forget drops what was stored for the object named key.
func (m *Memory[V]) Forget(key types.NamespacedName) { m.m.Delete(key) }

// Len is the number of objects remembered.
func (m *Memory[V]) Len() int {
	n := 0
	m.m.Range(func(any, any) bool { n++; return true })
	return n
}

// Clear forgets every object, as a restart of the process does.
func (m *Memory[V]) Clear() { m.m.Clear() }
