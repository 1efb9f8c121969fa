package skeleton_test

import (
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

func object(uid types.UID) *hypervisorv1alpha1.MachineClaim {
	return &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: uid}}
}

// LoadOrStore keeps the first value stored for an object, and starts afresh
// for an object made again under the same name.
func TestMemoryLoadOrStore(t *testing.T) {
	var m skeleton.Memory[*int]
	first, second := new(int), new(int)
	old := object("uid-1")
	if got, loaded := m.LoadOrStore(old, first); loaded || got != first {
		t.Fatalf("first LoadOrStore = %p, %v; want the value given, not loaded", got, loaded)
	}
	if got, loaded := m.LoadOrStore(old, second); !loaded || got != first {
		t.Fatalf("second LoadOrStore = %p, %v; want the first value, loaded", got, loaded)
	}
	again := object("uid-2")
	if got, loaded := m.LoadOrStore(again, second); loaded || got != second {
		t.Fatalf("LoadOrStore for the object made again = %p, %v; want the value given, not loaded", got, loaded)
	}
	if got, ok := m.Load(again); !ok || got != second {
		t.Fatalf("Load after replacing = %p, %v; want the new object's value", got, ok)
	}
	if _, ok := m.Load(old); ok {
		t.Fatal("the earlier object's value is still loaded for it")
	}
	m.Forget(client.ObjectKeyFromObject(again))
	if m.Len() != 0 {
		t.Fatalf("Len after Forget = %d, want 0", m.Len())
	}
}

// Callers racing to load or store for one object, over an earlier object's
// entry, all get one value: the one that was stored first.
func TestMemoryLoadOrStoreRace(t *testing.T) {
	var m skeleton.Memory[*int]
	m.Store(object("earlier"), new(int))
	obj := object("now")
	const callers = 16
	got := make([]*int, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = m.LoadOrStore(obj, new(int))
		}()
	}
	wg.Wait()
	stored, ok := m.Load(obj)
	if !ok {
		t.Fatal("nothing stored for the object")
	}
	for i, v := range got {
		if v != stored {
			t.Fatalf("caller %d got %p, want the stored %p", i, v, stored)
		}
	}
}
