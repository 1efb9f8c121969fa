//go:build !hourglass

package manager

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// readyClaimJSON is a claim as the watch delivers it: decoded from its own
// bytes, so no string is shared with another claim until interned.
func readyClaimJSON(t testing.TB, i int) []byte {
	t.Helper()
	now := metav1.Now()
	c := hypervisorv1alpha1.MachineClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "hypervisor.hyperfleet.io/v1alpha1", Kind: "MachineClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("claim-%05d", i), Namespace: "tenant-a", UID: "0b7c1f0e-6a55-4b1e-9d5e-000000000000",
			ResourceVersion: "123456", Generation: 1, CreationTimestamp: now,
			Labels:      map[string]string{"hyperfleet.io/pool": "ci-linux", "app.kubernetes.io/managed-by": "hyperfleet"},
			Annotations: map[string]string{"hyperfleet.io/owner": fmt.Sprintf("tenant-a/claim-%05d", i)},
			Finalizers:  []string{"hypervisor.hyperfleet.io/machine"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "hypervisor.hyperfleet.io/v1alpha1", Kind: "RunnerPool", Name: "ci-linux", UID: "u",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: hypervisorv1alpha1.MachineClaimSpec{},
		Status: hypervisorv1alpha1.MachineClaimStatus{
			ObservedGeneration: 1, Phase: hypervisorv1alpha1.MachineReady, Provider: "Proxmox",
			ClusterName: "pve-lab", MachineName: fmt.Sprintf("hf-claim-%05d", i), Node: "pve1",
			Conditions: []metav1.Condition{
				{Type: "Ready", Status: metav1.ConditionTrue, Reason: "MachineReady", Message: fmt.Sprintf("machine hf-claim-%05d is ready at 10.0.0.7 on pve1", i), LastTransitionTime: now, ObservedGeneration: 1},
				{Type: "Reconciling", Status: metav1.ConditionFalse, Reason: "MachineReady", Message: "the machine is ready", LastTransitionTime: now, ObservedGeneration: 1},
				{Type: "Stalled", Status: metav1.ConditionFalse, Reason: "MachineReady", Message: "the machine is ready", LastTransitionTime: now, ObservedGeneration: 1},
			},
		},
	}
	c.Spec.TemplateRef.Name = "ubuntu-small"
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeClaim(t testing.TB, b []byte) *hypervisorv1alpha1.MachineClaim {
	t.Helper()
	c := &hypervisorv1alpha1.MachineClaim{}
	if err := json.Unmarshal(b, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func sameStorage(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// Interning changes no value, and two claims then share their repeated
// strings (and not their unique ones' slices or maps).
func TestInternKeepsValuesAndShares(t *testing.T) {
	in := newInterner()
	a, b := decodeClaim(t, readyClaimJSON(t, 1)), decodeClaim(t, readyClaimJSON(t, 2))
	wantA, wantB := a.DeepCopy(), b.DeepCopy()
	for _, c := range []*hypervisorv1alpha1.MachineClaim{a, b} {
		if _, err := in.transform(c); err != nil {
			t.Fatal(err)
		}
	}
	if !equality.Semantic.DeepEqual(a, wantA) || !equality.Semantic.DeepEqual(b, wantB) {
		t.Fatalf("interning changed a value:\n%+v\nwant\n%+v", a, wantA)
	}
	if sameStorage(wantA.Namespace, wantB.Namespace) {
		t.Fatal("the decoded copies already share storage; the test proves nothing")
	}
	for what, pair := range map[string][2]string{
		"namespace":        {a.Namespace, b.Namespace},
		"label value":      {a.Labels["hyperfleet.io/pool"], b.Labels["hyperfleet.io/pool"]},
		"finalizer":        {a.Finalizers[0], b.Finalizers[0]},
		"owner kind":       {a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind},
		"condition reason": {a.Status.Conditions[1].Reason, b.Status.Conditions[1].Reason},
		"shared message":   {a.Status.Conditions[1].Message, b.Status.Conditions[1].Message},
		"phase":            {string(a.Status.Phase), string(b.Status.Phase)},
		"template":         {a.Spec.TemplateRef.Name, b.Spec.TemplateRef.Name},
	} {
		if !sameStorage(pair[0], pair[1]) {
			t.Errorf("%s %q is held twice", what, pair[0])
		}
	}
	a.Labels["x"] = "y"
	if _, ok := b.Labels["x"]; ok {
		t.Error("two claims share a label map")
	}
}

// The table never holds more than internLimit strings, whatever it is fed.
func TestInternBounded(t *testing.T) {
	in := newInterner()
	for i := range 3 * internLimit {
		in.str(fmt.Sprintf("unique-%d", i))
		if len(in.m) > internLimit {
			t.Fatalf("%d strings held, limit %d", len(in.m), internLimit)
		}
	}
}

// BenchmarkCachedClaimHeap prints the heap one cached Ready claim keeps,
// decoded as the watch decodes it, with and without interning:
//
//	go test -run '^$' -bench CachedClaimHeap ./internal/manager/
func BenchmarkCachedClaimHeap(b *testing.B) {
	const n = 5000
	docs := make([][]byte, n)
	for i := range docs {
		docs[i] = readyClaimJSON(b, i)
	}
	for _, interned := range []bool{false, true} {
		b.Run(fmt.Sprintf("interned=%t", interned), func(b *testing.B) {
			for range b.N {
				in := newInterner()
				before := liveHeap()
				kept := make([]*hypervisorv1alpha1.MachineClaim, n)
				for i, d := range docs {
					kept[i] = decodeClaim(b, d)
					if interned {
						_, _ = in.transform(kept[i])
					}
				}
				after := liveHeap()
				b.ReportMetric(float64(after-before)/n, "B/claim")
				runtime.KeepAlive(kept)
				runtime.KeepAlive(in)
			}
		})
	}
}
