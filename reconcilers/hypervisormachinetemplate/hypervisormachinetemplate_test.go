package hypervisormachinetemplate_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

var readyCondition = hypervisorlab.ReadyCondition

func TestClusterAndTemplateBecomeReady(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}
	l.WaitReason(cluster, "Connected", 30*time.Second)
	if cluster.Status.Version != "8.2.4" || len(cluster.Status.Nodes) != 2 || cluster.Status.LastCheckTime == nil {
		t.Errorf("cluster status: version %q, nodes %v", cluster.Status.Version, cluster.Status.Nodes)
	}
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}}
	l.WaitReason(tmpl, "SourceFound", 30*time.Second)
	if tmpl.Status.ResolvedSource != "pve1/9000 (ubuntu-24.04)" {
		t.Errorf("resolved source %q", tmpl.Status.ResolvedSource)
	}
}

// A template whose source VM does not exist is Stalled, and says which
// field to check.
func TestMissingSourceIsStalled(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	vmid := int32(4242)
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "nowhere"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		},
	})
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "nowhere"}}
	l.WaitReason(tmpl, "TemplateNotFound", 30*time.Second)
	if !apimeta.IsStatusConditionTrue(tmpl.Status.Conditions, meta.StalledCondition) {
		t.Errorf("a missing source must be Stalled: %v", tmpl.Status.Conditions)
	}
	if ready := readyCondition(tmpl.Status.Conditions); !strings.Contains(ready.Message, "spec.proxmox.source") {
		t.Errorf("the condition does not name the field: %s", ready.Message)
	}
	if tmpl.Status.Provider != hypervisorv1alpha1.ProviderProxmox || tmpl.Status.ResolvedSource != "" {
		t.Errorf("status provider %q, resolved source %q", tmpl.Status.Provider, tmpl.Status.ResolvedSource)
	}
}

// A template naming a cluster that does not exist waits for it.
func TestMissingClusterIsAwaited(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	vmid := int32(hypervisorlab.TemplateVMID)
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "orphaned"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "elsewhere"},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		},
	})
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "orphaned"}}
	l.WaitReason(tmpl, meta.DependencyNotFoundReason, 30*time.Second)
	if apimeta.IsStatusConditionTrue(tmpl.Status.Conditions, meta.StalledCondition) {
		t.Errorf("a missing cluster may yet be created: not Stalled: %v", tmpl.Status.Conditions)
	}
}

func TestKubeVirtClusterAndTemplateBecomeReady(t *testing.T) {
	l := hypervisorlab.KubeVirt(t)
	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv"}}
	l.WaitReason(cluster, "Connected", 30*time.Second)
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}}
	l.WaitReason(tmpl, "SourceFound", 30*time.Second)
	if !strings.Contains(tmpl.Status.ResolvedSource, "spec.kubevirt.virtualMachine") {
		t.Errorf("resolved source %q", tmpl.Status.ResolvedSource)
	}
}

// A template from a ConfigMap that names a variable HyperFleet does not
// know is TemplateInvalid, naming the variable.
func TestKubeVirtTemplateFromConfigMapAndUnknownVariable(t *testing.T) {
	l := hypervisorlab.KubeVirt(t)
	yamlTemplate := "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  labels:\n    owner: ${cyberdesk_name}\n    by: ${managed_by}\n" +
		"spec:\n  template:\n    spec:\n      domain:\n        devices: {}\n"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vm-template"}, Data: map[string]string{"template.yaml": strings.Replace(yamlTemplate, "${managed_by}", "${manager}", 1)}}
	l.Create(cm)
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "from-cm"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "kv"},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{TemplateConfigMapRef: &hypervisorv1alpha1.ConfigMapKeyReference{Name: "vm-template"}},
		},
	})
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "from-cm"}}
	l.WaitReason(tmpl, "TemplateInvalid", 30*time.Second)
	if ready := readyCondition(tmpl.Status.Conditions); !strings.Contains(ready.Message, "${manager}") {
		t.Errorf("the condition does not name the unknown variable: %s", ready.Message)
	}
}
