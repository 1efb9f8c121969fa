package machineclaim_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/proxmox"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
)

// A claim whose references are all taken by machines HyperFleet does not
// own gives up after three, Failed with its reason, instead of moving on
// for ever (each move may be a clone). The count is read from the
// reference in status, so it holds across restarts.
func TestClaimGivesUpAfterThreeTakenReferences(t *testing.T) {
	l := newLab(t)
	l.AsTenant()
	// The claim waits for its template, so its VMIDs can be taken first.
	l.claim("crowded", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.TemplateRef.Name = "later" })
	mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "crowded"}}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		err := l.Get(mc)
		return err == nil && mc.UID != "", "claim not read yet"
	})
	// The provider's VMID sequence for the claim: Reference, then
	// NextReference. Building a provider makes no request.
	p, err := proxmox.New(proxmox.Config{Endpoint: l.Sim.URL(), TokenID: "root@pam!x", TokenSecret: "x", Installation: "any"})
	if err != nil {
		t.Fatal(err)
	}
	o := providers.Owner{UID: string(mc.UID), Namespace: mc.Namespace, Name: mc.Name}
	ref := p.Reference(o)
	var chain []int
	for range 5 {
		chain = append(chain, ref.VMID)
		l.Sim.AddVM("pve1", ref.VMID, "someone-else", []string{"prod"}, false)
		ref, _ = p.NextReference(o, ref)
	}
	vmid := int32(hypervisorlab.TemplateVMID)
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "later"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		},
	})
	mc = l.waitPhase("crowded", hypervisorv1alpha1.MachineFailed, time.Minute)
	if mc.Status.TerminationReason != machineclaim.ReasonReferencesExhausted {
		t.Errorf("termination reason %q, want %s", mc.Status.TerminationReason, machineclaim.ReasonReferencesExhausted)
	}
	if mc.Status.VMID == nil || int(*mc.Status.VMID) != chain[2] {
		t.Errorf("last reference tried = %v, want the third, %d (sequence %v)", mc.Status.VMID, chain[2], chain)
	}
	for _, vm := range l.Sim.VMs() {
		if vm.Name != "someone-else" && !vm.Template {
			t.Errorf("a machine was made: %+v", vm)
		}
	}
	// Deleting the claim leaves the others' machines alone.
	if err := l.C.Delete(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		return l.Get(mc) != nil, "claim still there"
	})
	for _, id := range chain {
		if _, ok := l.Sim.VM(id); !ok {
			t.Errorf("VM %d, not ours, was deleted", id)
		}
	}
}
