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
		Spec:   kubevirtv1.VirtualMachineInstanceSpec{Hostname: "h"},
		Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, NodeName: "n1"},
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
			if vmi.Spec.Hostname != "" || vmi.Status.NodeName != "n1" {
				t.Errorf("cached instance = %+v, want no spec and its status kept", vmi)
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
