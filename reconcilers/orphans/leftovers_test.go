package orphans_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// A VM made before installations whose claim is one of ours is marked as
// this installation's: from then on it is swept like any other.
func TestSweeperMarksUnmarkedMachinesOfItsClaims(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	claim := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "from-before"},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
	}
	l.Create(claim)
	l.Sim.AddVM("pve1", 4545, "hf-from-before", []string{"hyperfleet", "hf-owner-" + string(claim.UID)}, true)
	sweptWithin(t, 30*time.Second, func() (bool, string) {
		vm, ok := l.Sim.VM(4545)
		return ok && slices.Contains(vm.Tags, ourTag), fmt.Sprintf("VM 4545 (exists %v) has tags %v", ok, vm.Tags)
	})
}

// Cloud-init ISOs of this installation whose VM is gone are deleted after
// the grace; another installation's, one whose VMID is held, one made
// before installations and any other ISO are left alone.
func TestSweeperDeletesLeftoverISOs(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	l.WaitReason(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}, "Connected", 30*time.Second)
	// The VMID is held, by a VM that is no orphan to sweep: the ISO may be
	// the upload of a machine being configured.
	l.Sim.AddVM("pve1", 4646, "web-1", []string{"prod"}, true)
	mine := "hf-cloudinit-" + hypervisorlab.Installation + "-5000.iso"
	keep := []string{
		"hf-cloudinit-" + hypervisorlab.Installation + "-4646.iso", "hf-cloudinit-other-5001.iso",
		"ubuntu-24.04.iso", "user-data-5002.iso",
	}
	for _, name := range append([]string{mine}, keep...) {
		l.Sim.AddVolume("pve1", "local", "iso", name, 4096)
	}
	sweptWithin(t, 30*time.Second, func() (bool, string) {
		isos := l.Sim.Volumes("pve1", "local", "iso")
		return !slices.Contains(isos, mine), "ISOs: " + strings.Join(isos, ", ")
	})
	if isos := l.Sim.Volumes("pve1", "local", "iso"); !slices.Equal(isos, keep) {
		t.Errorf("ISOs left %v, want %v", isos, keep)
	}
}
