package machineclaim_test

import (
	"context"
	"strings"
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

// A claim that asks for its machine's name (spec.machineName) gets a VM of
// that name, deleted with the claim; the name cannot be changed; and a
// name held by a VM HyperFleet does not own is never taken over: that
// claim waits, and the VM is left as it was.
func TestKubeVirtClaimGetsTheMachineNameItAsksFor(t *testing.T) {
	l := newKubeVirtLab(t)
	ctx := context.Background()
	l.claim("named", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.MachineName = "desktop-1" })
	mc := l.waitPhase("named", hypervisorv1alpha1.MachineReady, time.Minute)
	if mc.Status.MachineName != "desktop-1" {
		t.Fatalf("status.machineName %q, want desktop-1", mc.Status.MachineName)
	}
	vm, err := l.VM("desktop-1")
	if err != nil {
		t.Fatal(err)
	}
	if vm.Labels[kubevirt.LabelOwnerUID] != string(mc.UID) || vm.Labels[kubevirt.LabelOwnerKind] != "MachineClaim" {
		t.Errorf("VM desktop-1 is not the claim's: %v", vm.Labels)
	}

	changed := mc.DeepCopy()
	changed.Spec.MachineName = "desktop-2"
	if err := l.C.Update(ctx, changed); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.machineName is immutable") {
		t.Errorf("changing spec.machineName: %v, want it refused as immutable", err)
	}

	foreign := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "someone-elses", Namespace: l.NS, Labels: map[string]string{"app": "theirs"}},
		Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			Spec: kubevirtv1.VirtualMachineInstanceSpec{Domain: kubevirtv1.DomainSpec{}},
		}},
	}
	l.Create(foreign)
	l.claim("squatter", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.MachineName = "someone-elses" })
	sq := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "squatter"}}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		if err := l.Get(sq); err != nil {
			return false, err.Error()
		}
		ready := hypervisorlab.ReadyCondition(sq.Status.Conditions)
		return sq.Status.MachineName == "someone-elses" && strings.Contains(ready.Message, "not owned"),
			hypervisorlab.Describe(sq.Status.Phase, sq.Status.Conditions)
	})
	if sq.Status.Phase == hypervisorv1alpha1.MachineReady || sq.Status.Phase == hypervisorv1alpha1.MachineRunning {
		t.Errorf("the claim took over a VM it does not own: %s", hypervisorlab.Describe(sq.Status.Phase, sq.Status.Conditions))
	}
	if err := l.C.Delete(ctx, sq); err != nil {
		t.Fatal(err)
	}
	l.waitGone(sq)
	theirs, err := l.VM("someone-elses")
	if err != nil {
		t.Fatalf("the VM HyperFleet does not own was deleted with the claim: %v", err)
	}
	if theirs.Labels[kubevirt.LabelOwnerUID] != "" || theirs.Labels["app"] != "theirs" {
		t.Errorf("the VM HyperFleet does not own was changed: %v", theirs.Labels)
	}

	if err := l.C.Delete(ctx, mc); err != nil {
		t.Fatal(err)
	}
	l.waitGone(mc)
	if _, err := l.VM("desktop-1"); !apierrors.IsNotFound(err) {
		t.Errorf("VM desktop-1 outlived its claim: %v", err)
	}
}

// waitGone waits until the claim is deleted.
func (l *kvLab) waitGone(mc *hypervisorv1alpha1.MachineClaim) {
	l.T.Helper()
	eventually.That(l.T, 30*time.Second, func() (bool, string) {
		err := l.Get(mc)
		return apierrors.IsNotFound(err), "claim still there: " + hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions)
	})
}
