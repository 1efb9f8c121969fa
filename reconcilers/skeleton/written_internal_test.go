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
	var w WrittenStatus[*hypervisorv1alpha1.MachineClaim]

	// Read 4, wrote Provisioning as 5.
	w.remember(claimKey, "4", false, claimAt("5", hypervisorv1alpha1.MachineProvisioning), deepCopy)
	// The cache still at 4: overlaid; this reconcile writes Ready as 6.
	read := claimAt("4", "")
	if !w.overlay(claimKey, read, copyStatus) || read.Status.Phase != hypervisorv1alpha1.MachineProvisioning {
		t.Fatalf("version 4 read as %q, want the write over it", read.Status.Phase)
	}
	w.remember(claimKey, "4", true, claimAt("6", hypervisorv1alpha1.MachineReady), deepCopy)
	// The cache now shows the first write (5), not yet the second.
	read = claimAt("5", hypervisorv1alpha1.MachineProvisioning)
	if !w.overlay(claimKey, read, copyStatus) || read.Status.Phase != hypervisorv1alpha1.MachineReady {
		t.Errorf("version 5 read as %q, want the last write (Ready)", read.Status.Phase)
	}
	// Caught up: read as it is, and the entry goes.
	read = claimAt("6", hypervisorv1alpha1.MachineReady)
	if w.overlay(claimKey, read, copyStatus) {
		t.Error("the last write itself was overlaid")
	}
	if w.overlay(claimKey, claimAt("5", ""), copyStatus) {
		t.Error("the entry outlived the cache catching up")
	}

	// Somebody else's version ends the chain too.
	w.remember(claimKey, "10", false, claimAt("11", hypervisorv1alpha1.MachineReady), deepCopy)
	if w.overlay(claimKey, claimAt("12", hypervisorv1alpha1.MachineStopping), copyStatus) {
		t.Error("somebody else's newer write was overlaid")
	}
}

// claimKey names the claim of these tests; claimAt is it at version rv in phase.
var claimKey = types.NamespacedName{Namespace: "ns", Name: "c"}

func claimAt(rv string, phase hypervisorv1alpha1.MachinePhase) *hypervisorv1alpha1.MachineClaim {
	return &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: claimKey.Namespace, Name: claimKey.Name, ResourceVersion: rv},
		Status: hypervisorv1alpha1.MachineClaimStatus{Phase: phase}}
}

func copyStatus(dst, src *hypervisorv1alpha1.MachineClaim) { dst.Status = *src.Status.DeepCopy() }

func deepCopy(c *hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.MachineClaim {
	return c.DeepCopy()
}

// A reconcile that wrote a checkpoint on the way (read 4, checkpoint 5,
// final 6): the cache may show the checkpoint next, and it is overlaid with
// the final write; a reconcile whose last write was its checkpoint leaves
// that version out of its own chain.
func TestWrittenStatusOverlaysACheckpoint(t *testing.T) {
	var w WrittenStatus[*hypervisorv1alpha1.MachineClaim]

	w.remember(claimKey, "4", false, claimAt("6", hypervisorv1alpha1.MachineReady), deepCopy, "5")
	for _, rv := range []string{"4", "5"} {
		read := claimAt(rv, hypervisorv1alpha1.MachineProvisioning)
		if !w.overlay(claimKey, read, copyStatus) || read.Status.Phase != hypervisorv1alpha1.MachineReady {
			t.Errorf("version %s read as %q, want the final write (Ready)", rv, read.Status.Phase)
		}
	}

	w.remember(claimKey, "7", false, claimAt("8", hypervisorv1alpha1.MachineProvisioning), deepCopy, "8")
	if w.overlay(claimKey, claimAt("8", hypervisorv1alpha1.MachineProvisioning), copyStatus) {
		t.Error("the checkpoint that was the last write was overlaid as if older than itself")
	}
}
