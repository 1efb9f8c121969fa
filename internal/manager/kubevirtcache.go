//go:build !hourglass

package manager

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// The KubeVirt provider reads a cached VirtualMachine only for its
// metadata (ownership labels, the owner annotation), its run strategy and
// its status, and a cached instance only for its metadata and status; it
// builds the desired VM from the template, never from the cache, and
// changes a VM only with merge patches of the fields it names. The
// instance spec — domain, devices, volumes — held twice per machine (in
// the VM's template and in the instance) was the largest part of the
// operator's heap with thousands of KubeVirt machines (make bench-memory),
// so the cache keeps neither.

// slimVirtualMachine drops a cached VirtualMachine's instance template and
// managedFields.
func slimVirtualMachine(obj any) (any, error) {
	if vm, ok := obj.(*kubevirtv1.VirtualMachine); ok {
		vm.ManagedFields = nil
		vm.Spec.Template = nil
		vm.Spec.DataVolumeTemplates = nil
	}
	return obj, nil
}

// slimInstance drops a cached VirtualMachineInstance's spec, its
// managedFields and every part of its status the provider does not read
// (state.go reads the phase, its reason, the node, the conditions and the
// interfaces' addresses). Real KubeVirt fills the rest richly: volume and
// migration state, guest OS details, phase transition times, the launcher
// image, the active pods.
func slimInstance(obj any) (any, error) {
	if vmi, ok := obj.(*kubevirtv1.VirtualMachineInstance); ok {
		vmi.ManagedFields = nil
		vmi.Spec = kubevirtv1.VirtualMachineInstanceSpec{}
		s := vmi.Status
		vmi.Status = kubevirtv1.VirtualMachineInstanceStatus{
			Phase: s.Phase, Reason: s.Reason, NodeName: s.NodeName,
			Conditions: s.Conditions, Interfaces: s.Interfaces,
		}
	}
	return obj, nil
}

// kubeVirtCacheRules caches only the VirtualMachines and instances the
// provider labelled, slimmed (slimVirtualMachine, slimInstance).
func kubeVirtCacheRules(opts *cache.Options, strings *interner) {
	machines := labels.SelectorFromSet(labels.Set{kubevirt.LabelManaged: "true"})
	opts.ByObject[&kubevirtv1.VirtualMachine{}] = cache.ByObject{Label: machines, Transform: then(slimVirtualMachine, strings.transform)}
	opts.ByObject[&kubevirtv1.VirtualMachineInstance{}] = cache.ByObject{Label: machines, Transform: then(slimInstance, strings.transform)}
}

// kubeVirt interns the status strings of a VirtualMachine or an instance.
func (in *interner) kubeVirt(obj any) {
	switch o := obj.(type) {
	case *kubevirtv1.VirtualMachine:
		s := &o.Status
		s.PrintableStatus = kubevirtv1.VirtualMachinePrintableStatus(in.str(string(s.PrintableStatus)))
		for i := range s.Conditions {
			c := &s.Conditions[i]
			c.Type = kubevirtv1.VirtualMachineConditionType(in.str(string(c.Type)))
			c.Status = in.conditionStatus(c.Status)
			c.Reason, c.Message = in.str(c.Reason), in.str(c.Message)
		}
	case *kubevirtv1.VirtualMachineInstance:
		s := &o.Status
		s.Phase = kubevirtv1.VirtualMachineInstancePhase(in.str(string(s.Phase)))
		s.NodeName, s.Reason = in.str(s.NodeName), in.str(s.Reason)
		for i := range s.Conditions {
			c := &s.Conditions[i]
			c.Type = kubevirtv1.VirtualMachineInstanceConditionType(in.str(string(c.Type)))
			c.Status = in.conditionStatus(c.Status)
			c.Reason, c.Message = in.str(c.Reason), in.str(c.Message)
		}
		for i := range s.Interfaces {
			s.Interfaces[i].Name = in.str(s.Interfaces[i].Name)
			s.Interfaces[i].InterfaceName = in.str(s.Interfaces[i].InterfaceName)
		}
	}
}

func (in *interner) conditionStatus(s corev1.ConditionStatus) corev1.ConditionStatus {
	return corev1.ConditionStatus(in.str(string(s)))
}
