package machineclaim_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// The MachineClaim lifecycle again, on KubeVirt: the same reconciler, the
// provider chosen by the HypervisorCluster, kubevirtsim playing KubeVirt.

// kvLab is one test's KubeVirt cluster "kv" and template "ubuntu", with
// what only the claim tests look for in it.
type kvLab struct{ *lab }

func newKubeVirtLab(t *testing.T) *kvLab {
	t.Helper()
	return &kvLab{&lab{hypervisorlab.KubeVirt(t)}}
}

// claimVMs are the namespace's VMs made for MachineClaims.
func (l *kvLab) claimVMs() []kubevirtv1.VirtualMachine {
	l.T.Helper()
	var list kubevirtv1.VirtualMachineList
	if err := l.C.List(context.Background(), &list, client.InNamespace(l.NS), client.MatchingLabels{kubevirt.LabelOwnerKind: "MachineClaim"}); err != nil {
		l.T.Fatal(err)
	}
	return list.Items
}

// nothingLeft: no VM, instance or cloud-init Secret of a claim remains.
func (l *kvLab) nothingLeft(timeout time.Duration) {
	l.T.Helper()
	eventually.That(l.T, timeout, func() (bool, string) {
		var vmis kubevirtv1.VirtualMachineInstanceList
		var secrets corev1.SecretList
		sel := client.MatchingLabels{kubevirt.LabelOwnerKind: "MachineClaim"}
		if err := l.C.List(context.Background(), &vmis, client.InNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		if err := l.C.List(context.Background(), &secrets, client.InNamespace(l.NS), sel); err != nil {
			return false, err.Error()
		}
		vms := l.claimVMs()
		return len(vms)+len(vmis.Items)+len(secrets.Items) == 0,
			fmt.Sprintf("%d VMs, %d instances, %d Secrets left", len(vms), len(vmis.Items), len(secrets.Items))
	})
}

func TestKubeVirtClaimLifecycleWithTimeout(t *testing.T) {
	l := newKubeVirtLab(t)
	l.claim("box", func(mc *hypervisorv1alpha1.MachineClaim) {
		mc.Spec.Timeout = &metav1.Duration{Duration: 4 * time.Second}
		mc.Spec.Hostname = "box"
	})
	mc := l.waitPhase("box", hypervisorv1alpha1.MachineReady, time.Minute)
	if mc.Status.Node == "" || len(mc.Status.Addresses) == 0 || mc.Status.ExpiryTime == nil || mc.Status.VMID != nil ||
		mc.Status.ProviderID != "kubevirt://"+l.NS+"/"+mc.Status.MachineName || mc.Status.Provider != hypervisorv1alpha1.ProviderKubeVirt {
		t.Fatalf("Ready claim status incomplete: %+v", mc.Status)
	}
	vm, err := l.VM(mc.Status.MachineName)
	if err != nil {
		t.Fatal(err)
	}
	spec := vm.Spec.Template.Spec
	if vm.Labels[kubevirt.LabelOwnerUID] != string(mc.UID) || vm.Labels["team"] != "ci" || vm.Labels["app"] != "runner" ||
		spec.Domain.CPU == nil || spec.Domain.CPU.Cores != 2 || spec.Hostname != "box" ||
		vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != kubevirtv1.RunStrategyRerunOnFailure {
		t.Errorf("VM not made as the template says: labels %v, runStrategy %v, spec %+v", vm.Labels, vm.Spec.RunStrategy, spec)
	}
	secret := &corev1.Secret{}
	if err := l.C.Get(context.Background(), client.ObjectKey{Namespace: l.NS, Name: mc.Status.MachineName + "-cloudinit"}, secret); err != nil {
		t.Fatal(err)
	}
	if ud := string(secret.Data[kubevirt.UserDataKey]); !strings.Contains(ud, "user: ubuntu") || !strings.Contains(ud, "ops@example.com") {
		t.Errorf("cloud-init user data: %q", ud)
	}

	claimClock.Step(t, 4*time.Second) // the claim's timeout
	mc = l.waitPhase("box", hypervisorv1alpha1.MachineTerminated, 30*time.Second)
	if mc.Status.TerminationReason != "Expired" {
		t.Errorf("termination reason %q, want Expired", mc.Status.TerminationReason)
	}
	l.nothingLeft(10 * time.Second)
}

func TestKubeVirtSelfShutdownIsDetectedAndCleanedUp(t *testing.T) {
	l := newKubeVirtLab(t)
	l.claim("runner")
	mc := l.waitPhase("runner", hypervisorv1alpha1.MachineReady, time.Minute)
	if err := kvSim.GuestShutdown(l.NS, mc.Status.MachineName); err != nil {
		t.Fatal(err)
	}
	mc = l.waitPhase("runner", hypervisorv1alpha1.MachineTerminated, 30*time.Second)
	if mc.Status.TerminationReason != "ShutDown" {
		t.Errorf("termination reason %q, want ShutDown", mc.Status.TerminationReason)
	}
	l.nothingLeft(10 * time.Second)
}

func TestKubeVirtDeleteDuringProvisioningLeavesNothing(t *testing.T) {
	l := newKubeVirtLab(t)
	name := "hf-" + l.NS + "-doomed"
	kvSim.HangScheduling(l.NS, name)
	defer kvSim.ReleaseScheduling(l.NS, name)
	mc := l.claim("doomed")
	l.waitPhase("doomed", hypervisorv1alpha1.MachineProvisioning, 30*time.Second)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		err := l.C.Get(context.Background(), client.ObjectKey{Namespace: l.NS, Name: name}, vmi)
		return err == nil && vmi.Status.Phase == kubevirtv1.Scheduling, fmt.Sprintf("instance %v %s", err, vmi.Status.Phase)
	})
	if err := l.C.Delete(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := l.Get(mc)
		return apierrors.IsNotFound(err), "claim still there: " + hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions)
	})
	l.nothingLeft(5 * time.Second)
}

// A claim's VM made from a template in a ConfigMap, its variables
// substituted. (A template naming an unknown variable is tested in
// hypervisormachinetemplate.)
func TestKubeVirtTemplateFromConfigMap(t *testing.T) {
	l := newKubeVirtLab(t)
	yamlTemplate := "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  labels:\n    owner: ${cyberdesk_name}\n    by: ${managed_by}\n" +
		"spec:\n  template:\n    spec:\n      domain:\n        devices: {}\n"
	l.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vm-template"}, Data: map[string]string{"template.yaml": yamlTemplate}})
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "from-cm"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "kv"},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{TemplateConfigMapRef: &hypervisorv1alpha1.ConfigMapKeyReference{Name: "vm-template"}},
		},
	})
	l.claim("cm-claim", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.TemplateRef.Name = "from-cm" })
	mc := l.waitPhase("cm-claim", hypervisorv1alpha1.MachineReady, time.Minute)
	vm, err := l.VM(mc.Status.MachineName)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Labels["owner"] != "cm-claim" || vm.Labels["by"] != "hyperfleet" {
		t.Errorf("variables not substituted: %v", vm.Labels)
	}
}

func TestKubeVirtFiftyClaimsAtOnce(t *testing.T) {
	l := newKubeVirtLab(t)
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.claim(fmt.Sprintf("burst-%02d", i))
		}()
	}
	wg.Wait()
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		if err := l.C.List(context.Background(), &list, inNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, mc := range list.Items {
			if mc.Status.Phase == hypervisorv1alpha1.MachineReady {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d Ready", ready, n)
	})
	if vms := l.claimVMs(); len(vms) != n {
		t.Errorf("%d VMs for %d claims", len(vms), n)
	}
	if err := l.C.DeleteAllOf(context.Background(), &hypervisorv1alpha1.MachineClaim{}, client.InNamespace(l.NS)); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		if err := l.C.List(context.Background(), &list, inNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d claims left", len(list.Items))
	})
	l.nothingLeft(30 * time.Second)
}

// A claim on a kubevirt cluster reached through a kubeconfig in its
// credentials Secret (here the same API server, addressed as a remote one
// would be). (The cluster's check of a kubeconfig is tested in
// hypervisorcluster.)
func TestKubeVirtClaimOnRemoteClusterThroughKubeconfig(t *testing.T) {
	l := newKubeVirtLab(t)
	l.RemoteKubeVirt("kv-remote", "remote-ubuntu")
	l.claim("remote-box", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.TemplateRef.Name = "remote-ubuntu" })
	mc := l.waitPhase("remote-box", hypervisorv1alpha1.MachineReady, time.Minute)
	if _, err := l.VM(mc.Status.MachineName); err != nil {
		t.Errorf("the claim's VM is not on the remote cluster: %v", err)
	}
}
