package manager

import (
	kubevirtv1 "kubevirt.io/api/core/v1"
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

// then runs a second transform after the first, as one informer transform.
func then(first, second func(any) (any, error)) func(any) (any, error) {
	return func(obj any) (any, error) {
		obj, err := first(obj)
		if err != nil {
			return nil, err
		}
		return second(obj)
	}
}
