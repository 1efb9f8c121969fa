package skeleton

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// Two writes in a row over a cache that lags both: whichever older version
// the cache shows next (the first write's, before the second's), it is
// overlaid with the last status written, until the cache shows the last
// write or somebody else's.
func TestWrittenStatusOverlaysEveryVersionOfAChain(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	at := func(rv string, phase hypervisorv1alpha1.MachinePhase) *hypervisorv1alpha1.MachineClaim {
		return &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", ResourceVersion: rv},
			Status: hypervisorv1alpha1.MachineClaimStatus{Phase: phase}}
	}
	copyStatus := func(dst, src *hypervisorv1alpha1.MachineClaim) { dst.Status = *src.Status.DeepCopy() }
	var w WrittenStatus[*hypervisorv1alpha1.MachineClaim]

	// Read 4, wrote Provisioning as 5.
	w.remember(key, "4", false, at("5", hypervisorv1alpha1.MachineProvisioning), deepCopy)
	// The cache still at 4: overlaid; this reconcile writes Ready as 6.
	read := at("4", "")
	if !w.overlay(key, read, copyStatus) || read.Status.Phase != hypervisorv1alpha1.MachineProvisioning {
		t.Fatalf("version 4 read as %q, want the write over it", read.Status.Phase)
	}
	w.remember(key, "4", true, at("6", hypervisorv1alpha1.MachineReady), deepCopy)
	// The cache now shows the first write (5), not yet the second.
	read = at("5", hypervisorv1alpha1.MachineProvisioning)
	if !w.overlay(key, read, copyStatus) || read.Status.Phase != hypervisorv1alpha1.MachineReady {
		t.Errorf("version 5 read as %q, want the last write (Ready)", read.Status.Phase)
	}
	// Caught up: read as it is, and the entry goes.
	read = at("6", hypervisorv1alpha1.MachineReady)
	if w.overlay(key, read, copyStatus) {
		t.Error("the last write itself was overlaid")
	}
	if w.overlay(key, at("5", ""), copyStatus) {
		t.Error("the entry outlived the cache catching up")
	}

	// Somebody else's version ends the chain too.
	w.remember(key, "10", false, at("11", hypervisorv1alpha1.MachineReady), deepCopy)
	if w.overlay(key, at("12", hypervisorv1alpha1.MachineStopping), copyStatus) {
		t.Error("somebody else's newer write was overlaid")
	}
}

func deepCopy(c *hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.MachineClaim {
	return c.DeepCopy()
}

// A reconcile that wrote a checkpoint on the way (read 4, checkpoint 5,
// final 6): the cache may show the checkpoint next, and it is overlaid with
// the final write; a reconcile whose last write was its checkpoint leaves
// that version out of its own chain.
func TestWrittenStatusOverlaysACheckpoint(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "c"}
	at := func(rv string, phase hypervisorv1alpha1.MachinePhase) *hypervisorv1alpha1.MachineClaim {
		return &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", ResourceVersion: rv},
			Status: hypervisorv1alpha1.MachineClaimStatus{Phase: phase}}
	}
	copyStatus := func(dst, src *hypervisorv1alpha1.MachineClaim) { dst.Status = *src.Status.DeepCopy() }
	var w WrittenStatus[*hypervisorv1alpha1.MachineClaim]

	w.remember(key, "4", false, at("6", hypervisorv1alpha1.MachineReady), deepCopy, "5")
	for _, rv := range []string{"4", "5"} {
		read := at(rv, hypervisorv1alpha1.MachineProvisioning)
		if !w.overlay(key, read, copyStatus) || read.Status.Phase != hypervisorv1alpha1.MachineReady {
			t.Errorf("version %s read as %q, want the final write (Ready)", rv, read.Status.Phase)
		}
	}

	w.remember(key, "7", false, at("8", hypervisorv1alpha1.MachineProvisioning), deepCopy, "8")
	if w.overlay(key, at("8", hypervisorv1alpha1.MachineProvisioning), copyStatus) {
		t.Error("the checkpoint that was the last write was overlaid as if older than itself")
	}
}
