// Package machinespec maps a HypervisorMachineTemplate (and a MachineClaim's
// own settings) to the providers.MachineSpec a provider's Create takes,
// completed with what lives in other objects: a KubeVirt VirtualMachine
// template held in a ConfigMap.
package machinespec

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// DefaultTemplateKey is the ConfigMap key a VirtualMachine template is read
// from when none is named.
const DefaultTemplateKey = "template.yaml"

// VarOwnerName is the placeholder a KubeVirt template gives the name of
// the machine's owner: the claim, or the Cyberdesk behind it. The name is
// the Cyberdesk operator's, whose templates are used unchanged.
const VarOwnerName = "cyberdesk_name"

// Variables are the placeholders a KubeVirt template may use beside the
// provider's own (${vm_name}, ${namespace}, ${managed_by},
// ${user_data_base64}), with their values for an owner named ownerName.
func Variables(ownerName string) map[string]string {
	return map[string]string{VarOwnerName: ownerName}
}

// templateCheckOwner stands in for the owner's name when a template is
// checked before any claim uses it.
const templateCheckOwner = "template-check"

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// Resolve is FromTemplate completed with what lives in other objects: a
// KubeVirt template held in a ConfigMap, read through reader (uncached, so
// an edit reaches the very next machine).
func Resolve(ctx context.Context, reader client.Reader, t *hypervisorv1alpha1.HypervisorMachineTemplate, claim *hypervisorv1alpha1.MachineClaim) (providers.MachineSpec, error) {
	if err := skeleton.Undecodable(t); err != nil {
		// Its undecodable fields were left zero: a machine made from it
		// would not be the machine anybody asked for.
		return providers.MachineSpec{}, providers.Permanent(meta.InvalidStoredSpecReason, err.Error(), nil)
	}
	s := FromTemplate(t, claim)
	kv := t.Spec.KubeVirt
	if kv == nil {
		return s, nil
	}
	ownerName := templateCheckOwner
	if claim != nil {
		ownerName = claim.Name
	}
	s.KubeVirt = &providers.KubeVirtSpec{RunStrategy: string(kv.RunStrategy), Variables: Variables(ownerName)}
	switch {
	case kv.VirtualMachine != nil:
		s.KubeVirt.Template = kv.VirtualMachine.Raw
		s.KubeVirt.TemplateSource = "HypervisorMachineTemplate " + t.Name + " spec.kubevirt.virtualMachine"
	case kv.TemplateConfigMapRef != nil:
		ref := kv.TemplateConfigMapRef
		text, source, err := TemplateFromConfigMap(ctx, reader, types.NamespacedName{Namespace: t.Namespace, Name: ref.Name}, ref.Key)
		if err != nil {
			return s, err
		}
		s.KubeVirt.Template, s.KubeVirt.TemplateSource = []byte(text), source
	}
	return s, nil
}

// TemplateFromConfigMap reads a VirtualMachine template from a ConfigMap
// key. An empty key means DefaultTemplateKey, or the ConfigMap's only key. It is read directly, not
// from a cache, so an edit reaches the very next machine.
func TemplateFromConfigMap(ctx context.Context, reader client.Reader, key types.NamespacedName, dataKey string) (text, source string, err error) {
	cm := &corev1.ConfigMap{}
	if err := reader.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", providers.Permanent("TemplateNotFound", fmt.Sprintf(
				"ConfigMap %s, which holds the VirtualMachine template, does not exist; create it", key), err)
		}
		return "", "", providers.Transient("TemplateUnreadable", 0, fmt.Errorf("reading ConfigMap %s: %w", key, err))
	}
	if dataKey == "" {
		dataKey = DefaultTemplateKey
		if _, ok := cm.Data[dataKey]; !ok && len(cm.Data) == 1 {
			for k := range cm.Data {
				dataKey = k
			}
		}
	}
	text, ok := cm.Data[dataKey]
	if !ok {
		keys := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return "", "", providers.Permanent("TemplateNotFound", fmt.Sprintf(
			"ConfigMap %s has no key %q for the VirtualMachine template (it has: %s)", key, dataKey, strings.Join(keys, ", ")), nil)
	}
	return text, fmt.Sprintf("ConfigMap %s key %s", key, dataKey), nil
}

// FromTemplate turns a template (and the claim's own settings, when given)
// into what a provider's Create takes. The reference and owner are the
// caller's to fill: they come from the claim's status.
func FromTemplate(t *hypervisorv1alpha1.HypervisorMachineTemplate, claim *hypervisorv1alpha1.MachineClaim) providers.MachineSpec {
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
