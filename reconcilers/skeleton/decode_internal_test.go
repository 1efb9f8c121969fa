package skeleton

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// The Warning of an object that cannot be decoded is remembered once per
// object, and forgotten when the Driver finds the object gone or lets it
// go: an undecodable object deleted leaves nothing behind, and one made
// again under its name is reported afresh.
func TestUndecodableReportsAreForgottenWithTheObject(t *testing.T) {
	l := &lastMessages{byObject: map[objectKey]lastMessage{}}
	saved := reportedUndecodable
	reportedUndecodable = l
	t.Cleanup(func() { reportedUndecodable = saved })

	claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "one"}}
	if !l.first(claim, "bad") || l.first(claim, "bad") {
		t.Fatal("the same message for the same object is reported once")
	}
	again := claim.DeepCopy()
	again.UID = "two"
	if !l.first(again, "bad") {
		t.Error("an object made again under the name is reported afresh")
	}
	// Another kind's object of the same name is another object.
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "three"}}
	if !l.first(tmpl, "bad") || l.entries.Load() != 2 {
		t.Fatalf("entries %d, want one per kind", l.entries.Load())
	}

	d := &Driver[*hypervisorv1alpha1.MachineClaim, struct{}]{Kind: Kind[*hypervisorv1alpha1.MachineClaim, struct{}]{
		New: func() *hypervisorv1alpha1.MachineClaim { return &hypervisorv1alpha1.MachineClaim{} },
	}}
	d.forget(client.ObjectKeyFromObject(claim))
	if l.entries.Load() != 1 || !l.first(again, "bad") {
		t.Errorf("the claim's entry was kept after the Driver forgot it (entries %d)", l.entries.Load())
	}
}
