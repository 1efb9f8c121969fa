package machinespec_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
)

// The template sizes and places the machine; the claim's hostname and user
// data win over the template's.
func TestFromTemplate(t *testing.T) {
	vmid, mem, disk := int32(9000), resource.MustParse("2Gi"), resource.MustParse("20Gi")
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		Resources: &hypervisorv1alpha1.MachineResources{CPUCores: 2, Memory: &mem, DiskSize: &disk},
		CloudInit: &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", UserData: "#cloud-config from the template"},
		Proxmox: &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid},
			CloneMode: hypervisorv1alpha1.CloneFull, Pool: "ci", Tags: []string{"runner"}},
	}}
	claim := &hypervisorv1alpha1.MachineClaim{Spec: hypervisorv1alpha1.MachineClaimSpec{Hostname: "box", UserData: "#cloud-config from the claim"}}
	s := machinespec.FromTemplate(tmpl, claim)
	if s.CPUCores != 2 || s.MemoryMiB != 2048 || s.DiskGiB != 20 || s.Hostname != "box" || s.CloudInit.User != "ubuntu" ||
		s.CloudInit.UserData != "#cloud-config from the claim" || s.Proxmox == nil || s.Proxmox.SourceVMID != 9000 ||
		!s.Proxmox.FullClone || s.Proxmox.Pool != "ci" || len(s.Tags) != 1 || s.KubeVirt != nil {
		t.Errorf("spec %+v", s)
	}
}

// An inline KubeVirt template needs no read.
func TestResolveInlineKubeVirtTemplate(t *testing.T) {
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "kv"}, Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(`{"kind":"VirtualMachine"}`)}},
	}}
	s, err := machinespec.Resolve(context.Background(), nil, tmpl, nil)
	if err != nil || s.KubeVirt == nil || string(s.KubeVirt.Template) != `{"kind":"VirtualMachine"}` ||
		s.KubeVirt.TemplateSource != "HypervisorMachineTemplate kv spec.kubevirt.virtualMachine" {
		t.Errorf("spec %+v, %v", s.KubeVirt, err)
	}
}
