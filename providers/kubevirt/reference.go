package kubevirt

import "github.com/hyperfleet/hyperfleet/providers"

// Reference is the owner's machine name; a VirtualMachine needs no number.
func (p *Provider) Reference(owner providers.Owner) providers.MachineRef {
	return providers.MachineRef{Name: providers.MachineName(owner), Namespace: owner.Namespace}
}

// NextReference offers none: the name is derived from the owner's own, so
// a VirtualMachine of that name that is not ours needs a person to resolve.
func (p *Provider) NextReference(providers.Owner, providers.MachineRef) (providers.MachineRef, bool) {
	return providers.MachineRef{}, false
}
