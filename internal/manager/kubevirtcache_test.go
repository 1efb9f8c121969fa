//go:build !hourglass

package manager

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// KubeVirt's kinds are cached only when ours, and without what the provider
// never reads; where KubeVirt is not served there is no rule for them (a
// rule for a kind the API server does not serve fails the manager's start).
func TestKubeVirtCacheRules(t *testing.T) {
	without, err := CacheOptions(Options{OperatorNamespace: "hyperfleet-system"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for obj := range without.ByObject {
		switch obj.(type) {
		case *kubevirtv1.VirtualMachine, *kubevirtv1.VirtualMachineInstance:
			t.Errorf("a cache rule for %T where KubeVirt is not served", obj)
		}
	}

	with, err := CacheOptions(Options{OperatorNamespace: "hyperfleet-system"}, true)
	if err != nil {
		t.Fatal(err)
	}
	running := kubevirtv1.RunStrategyAlways
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "hyperfleet"}}},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: &running, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
		Status:     kubevirtv1.VirtualMachineStatus{Ready: true},
	}
	vmi := &kubevirtv1.VirtualMachineInstance{
		Spec: kubevirtv1.VirtualMachineInstanceSpec{Hostname: "h"},
		Status: kubevirtv1.VirtualMachineInstanceStatus{
			Phase: kubevirtv1.Running, NodeName: "n1",
			Interfaces:                    []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.7"}},
			Conditions:                    []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstanceReady, Status: "True"}},
			LauncherContainerImageVersion: "quay.io/kubevirt/virt-launcher:v1.6.0",
			GuestOSInfo:                   kubevirtv1.VirtualMachineInstanceGuestOSInfo{Name: "Ubuntu"},
			VolumeStatus:                  []kubevirtv1.VolumeStatus{{Name: "rootdisk"}},
		},
	}
	found := 0
	for obj, by := range with.ByObject {
		switch obj.(type) {
		case *kubevirtv1.VirtualMachine:
			found++
			checkSelector(t, by.Label)
			if _, err := by.Transform(vm); err != nil {
				t.Fatal(err)
			}
			if vm.Spec.Template != nil || vm.ManagedFields != nil || vm.Spec.RunStrategy == nil || !vm.Status.Ready {
				t.Errorf("cached VM = %+v, want no template or managedFields, its run strategy and status kept", vm)
			}
		case *kubevirtv1.VirtualMachineInstance:
			found++
			checkSelector(t, by.Label)
			if _, err := by.Transform(vmi); err != nil {
				t.Fatal(err)
			}
			s := vmi.Status
			if vmi.Spec.Hostname != "" || s.NodeName != "n1" || s.Phase != kubevirtv1.Running ||
				len(s.Interfaces) != 1 || s.Interfaces[0].IP != "10.0.0.7" || len(s.Conditions) != 1 {
				t.Errorf("cached instance = %+v, want no spec, and the phase, node, interfaces and conditions kept", vmi)
			}
			if s.LauncherContainerImageVersion != "" || s.GuestOSInfo.Name != "" || s.VolumeStatus != nil {
				t.Errorf("cached instance status = %+v, want only what the provider reads", s)
			}
		}
	}
	if found != 2 {
		t.Fatalf("%d KubeVirt cache rules, want 2", found)
	}
}

func checkSelector(t *testing.T, sel labels.Selector) {
	t.Helper()
	if !sel.Matches(labels.Set{kubevirt.LabelManaged: "true"}) || sel.Matches(labels.Set{"app": "someone-elses"}) {
		t.Errorf("selector %s, want %s=true", sel, kubevirt.LabelManaged)
	}
}
