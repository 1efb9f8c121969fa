package hypervisors

import (
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
)

// MachineSpec turns a template (and the claim's own settings, when given)
// into what a provider's Create takes. The reference and owner are the
// caller's to fill: they come from the claim's status.
func MachineSpec(t *hypervisorv1alpha1.HypervisorMachineTemplate, claim *hypervisorv1alpha1.MachineClaim) providers.MachineSpec {
	ts := t.Spec
	var s providers.MachineSpec
	if r := ts.Resources; r != nil {
		s.CPUCores, s.CPUSockets = int(r.CPUCores), int(r.CPUSockets)
		if r.Memory != nil {
			s.MemoryMiB = r.Memory.Value() >> 20
		}
		if r.DiskSize != nil {
			s.DiskGiB = r.DiskSize.Value() >> 30
		}
	}
	if n := ts.Network; n != nil {
		s.Network = providers.NetworkSpec{Bridge: n.Bridge, Model: n.Model}
		if n.VLANTag != nil {
			s.Network.VLAN = int(*n.VLANTag)
		}
		if n.IPv4 != nil && n.IPv4.Mode == hypervisorv1alpha1.IPAddressStatic {
			s.Network.Gateway = n.IPv4.Gateway
		}
		if n.DNS != nil {
			s.Network.Nameservers, s.Network.SearchDomain = n.DNS.Nameservers, n.DNS.SearchDomain
		}
	}
	if ci := ts.CloudInit; ci != nil {
		s.CloudInit = providers.CloudInitSpec{User: ci.User, SSHAuthorizedKeys: ci.SSHAuthorizedKeys, UserData: ci.UserData}
	}
	if px := ts.Proxmox; px != nil {
		s.Proxmox = &providers.ProxmoxSpec{
			SourceName: px.Source.Name, SourceNode: px.Source.Node,
			FullClone: px.CloneMode == hypervisorv1alpha1.CloneFull, Pool: px.Pool, Disk: px.Disk,
		}
		if px.Source.VMID != nil {
			s.Proxmox.SourceVMID = int(*px.Source.VMID)
		}
		s.Tags = px.Tags
		if pl := ts.Placement; pl != nil {
			s.Proxmox.Nodes, s.Proxmox.Storage = pl.Nodes, pl.Storage
		}
	}
	if claim != nil {
		s.Hostname = claim.Spec.Hostname
		if claim.Spec.UserData != "" {
			s.CloudInit.UserData = claim.Spec.UserData
		}
	}
	return s
}
