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

// slimInstance drops a cached VirtualMachineInstance's spec and
// managedFields.
func slimInstance(obj any) (any, error) {
	if vmi, ok := obj.(*kubevirtv1.VirtualMachineInstance); ok {
		vmi.ManagedFields = nil
		vmi.Spec = kubevirtv1.VirtualMachineInstanceSpec{}
	}
	return obj, nil
}
