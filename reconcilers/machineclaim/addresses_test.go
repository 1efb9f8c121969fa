package machineclaim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// Static addressing: each claim takes a free address of the template's list,
// shows it in status and gets it through ipconfig0; when none is free the
// claim waits, saying so, until one is released.
func TestStaticAddressesComeFromThePool(t *testing.T) {
	l := newLab(t)
	vmid := int32(hypervisorlab.TemplateVMID)
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "static"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Network: &hypervisorv1alpha1.NetworkConfig{IPv4: &hypervisorv1alpha1.IPv4Config{
				Mode: hypervisorv1alpha1.IPAddressStatic, Addresses: []string{"10.0.20.11/24", "10.0.20.12/24"}, Gateway: "10.0.20.1"}},
			Proxmox: &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		},
	})
	static := func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.TemplateRef.Name = "static" }
	l.claim("a", static)
	l.claim("b", static)
	a := l.waitPhase("a", hypervisorv1alpha1.MachineReady, time.Minute)
	b := l.waitPhase("b", hypervisorv1alpha1.MachineReady, time.Minute)
	if a.Status.AssignedAddress == "" || a.Status.AssignedAddress == b.Status.AssignedAddress {
		t.Fatalf("addresses %q and %q: want two distinct ones from the pool", a.Status.AssignedAddress, b.Status.AssignedAddress)
	}
	vm, _ := l.Sim.VM(int(*a.Status.VMID))
	if want := "ip=" + a.Status.AssignedAddress + ",gw=10.0.20.1"; vm.Config["ipconfig0"] != want {
		t.Errorf("ipconfig0 = %q, want %q", vm.Config["ipconfig0"], want)
	}

	l.claim("c", static)
	c := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	l.WaitReason(c, "AddressPoolExhausted", 30*time.Second)

	if err := l.C.Delete(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := l.Get(a)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	c = l.waitPhase("c", hypervisorv1alpha1.MachineReady, time.Minute)
	if c.Status.AssignedAddress != a.Status.AssignedAddress {
		t.Errorf("c took %q, want the released %q", c.Status.AssignedAddress, a.Status.AssignedAddress)
	}
}
