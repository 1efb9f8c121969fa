package orphans_test

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// ourTag is the installation tag of the suite's registry.
var ourTag = "hf-inst-" + hypervisorlab.Installation

// The sweeper deletes a VM with our marks whose claim is gone, after its
// grace; a VM without our marks is never touched, nor one made before
// installations (no installation mark), which it only reports.
func TestSweeperDeletesOnlyOrphans(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	l.WaitReason(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}, "Connected", 30*time.Second)
	l.Sim.AddVM("pve1", 4242, "hf-gone-claim", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-000000000000", ourTag}, true)
	l.Sim.AddVM("pve1", 4343, "prod-db", []string{"prod"}, true)
	l.Sim.AddVM("pve1", 4444, "hf-before-installations", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-000000000001"}, true)
	sweptWithin(t, 30*time.Second, func() (bool, string) {
		_, orphan := l.Sim.VM(4242)
		return !orphan, "orphan 4242 still exists"
	})
	if _, ok := l.Sim.VM(4343); !ok {
		t.Fatal("the sweeper deleted a VM HyperFleet does not own")
	}
	if _, ok := l.Sim.VM(4444); !ok {
		t.Fatal("the sweeper deleted a VM made before installations, which may be another installation's")
	}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		unmarked, _ := hypervisorlab.MetricValue(t, "hyperfleet_orphans_unmarked", map[string]string{"provider": "proxmox", "kind": "machine"})
		return unmarked >= 1, fmt.Sprintf("hyperfleet_orphans_unmarked{kind=machine} = %v, want the unmarked VM counted", unmarked)
	})
}

func TestKubeVirtSweeperDeletesOnlyOrphans(t *testing.T) {
	l := hypervisorlab.KubeVirt(t)
	l.WaitReason(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv"}}, "Connected", 30*time.Second)
	orphan := func(name, kind string) *kubevirtv1.VirtualMachine {
		halted := kubevirtv1.RunStrategyHalted
		return &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				kubevirt.LabelManaged: "true", kubevirt.LabelOwnerKind: kind, kubevirt.LabelOwnerUID: "0badc0de-0000-4000-8000-000000000000",
				kubevirt.LabelInstallation: hypervisorlab.Installation,
			}},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
		}
	}
	l.Create(orphan("hf-gone-claim", "MachineClaim"))
	l.Create(orphan("cyberdesk-not-a-claim", "Cyberdesk"))
	l.Create(&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "prod-db"}, Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}})
	sweptWithin(t, 30*time.Second, func() (bool, string) {
		_, err := l.VM("hf-gone-claim")
		return apierrors.IsNotFound(err), fmt.Sprintf("orphan still there: %v", err)
	})
	for _, keep := range []string{"cyberdesk-not-a-claim", "prod-db"} {
		if _, err := l.VM(keep); err != nil {
			t.Errorf("the sweeper touched %s, which is no MachineClaim's: %v", keep, err)
		}
	}
}

// The sweeper counts what it deletes.
func TestSweeperCountsWhatItDeletes(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	before, _ := hypervisorlab.MetricValue(t, "hyperfleet_orphans_deleted_total", map[string]string{"provider": "proxmox"})
	l.Sim.AddVM("pve2", 5151, "hf-left-over", []string{"hyperfleet", "hf-owner-5ca1ab1e-0000-4000-8000-000000000000", ourTag}, false)
	sweptWithin(t, 30*time.Second, func() (bool, string) {
		after, _ := hypervisorlab.MetricValue(t, "hyperfleet_orphans_deleted_total", map[string]string{"provider": "proxmox"})
		return after >= before+1, fmt.Sprintf("hyperfleet_orphans_deleted_total %v → %v", before, after)
	})
}
