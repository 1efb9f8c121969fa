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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// The MachineClaim lifecycle again, on KubeVirt: the same reconciler, the
// provider chosen by the HypervisorCluster, kubevirtsim playing KubeVirt.

const kubevirtVM = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"labels":{"app":"runner"}},
"spec":{"template":{"spec":{"domain":{"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}]},
"resources":{"requests":{"memory":"1Gi"}}},"volumes":[{"name":"root","containerDisk":{"image":"quay.io/containerdisks/ubuntu:24.04"}}]}}}}`

// kvLab is one test's KubeVirt cluster and template objects.
type kvLab struct{ *lab }

func newKubeVirtLab(t *testing.T) *kvLab {
	t.Helper()
	l := &kvLab{&lab{t: t, ns: testenv.Namespace(t), c: testenv.Client()}}
	l.create(&hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "kv"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider:            hypervisorv1alpha1.ProviderKubeVirt,
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
			KubeVirt:            &hypervisorv1alpha1.KubeVirtClusterSpec{Labels: map[string]string{"team": "ci"}},
		},
	})
	l.create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "kv"},
			Resources:  &hypervisorv1alpha1.MachineResources{CPUCores: 2},
			CloudInit:  &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPklYEYOAAQ5wdG7Ld42DyDAYdrfAmV+qaWeMTrHZYce ops@example.com"}},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(kubevirtVM)}},
		},
	})
	return l
}

func (l *kvLab) vm(name string) (*kubevirtv1.VirtualMachine, error) {
	vm := &kubevirtv1.VirtualMachine{}
	return vm, l.c.Get(context.Background(), client.ObjectKey{Namespace: l.ns, Name: name}, vm)
}

// claimVMs are the namespace's VMs made for MachineClaims.
func (l *kvLab) claimVMs() []kubevirtv1.VirtualMachine {
	l.t.Helper()
	var list kubevirtv1.VirtualMachineList
	if err := l.c.List(context.Background(), &list, client.InNamespace(l.ns), client.MatchingLabels{kubevirt.LabelOwnerKind: "MachineClaim"}); err != nil {
		l.t.Fatal(err)
	}
	return list.Items
}

// nothingLeft: no VM, instance or cloud-init Secret of a claim remains.
func (l *kvLab) nothingLeft(timeout time.Duration) {
	l.t.Helper()
	eventually.That(l.t, timeout, func() (bool, string) {
		var vmis kubevirtv1.VirtualMachineInstanceList
		var secrets corev1.SecretList
		sel := client.MatchingLabels{kubevirt.LabelOwnerKind: "MachineClaim"}
		if err := l.c.List(context.Background(), &vmis, client.InNamespace(l.ns)); err != nil {
			return false, err.Error()
		}
		if err := l.c.List(context.Background(), &secrets, client.InNamespace(l.ns), sel); err != nil {
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
		mc.Status.ProviderID != "kubevirt://"+l.ns+"/"+mc.Status.MachineName || mc.Status.Provider != hypervisorv1alpha1.ProviderKubeVirt {
		t.Fatalf("Ready claim status incomplete: %+v", mc.Status)
	}
	vm, err := l.vm(mc.Status.MachineName)
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
	if err := l.c.Get(context.Background(), client.ObjectKey{Namespace: l.ns, Name: mc.Status.MachineName + "-cloudinit"}, secret); err != nil {
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
	if err := kvSim.GuestShutdown(l.ns, mc.Status.MachineName); err != nil {
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
	name := "hf-" + l.ns + "-doomed"
	kvSim.HangScheduling(l.ns, name)
	defer kvSim.ReleaseScheduling(l.ns, name)
	mc := l.claim("doomed")
	l.waitPhase("doomed", hypervisorv1alpha1.MachineProvisioning, 30*time.Second)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		err := l.c.Get(context.Background(), client.ObjectKey{Namespace: l.ns, Name: name}, vmi)
		return err == nil && vmi.Status.Phase == kubevirtv1.Scheduling, fmt.Sprintf("instance %v %s", err, vmi.Status.Phase)
	})
	if err := l.c.Delete(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := l.get(mc)
		return apierrors.IsNotFound(err), "claim still there: " + describe(mc.Status.Phase, mc.Status.Conditions)
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
	l.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vm-template"}, Data: map[string]string{"template.yaml": yamlTemplate}})
	l.create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "from-cm"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "kv"},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{TemplateConfigMapRef: &hypervisorv1alpha1.ConfigMapKeyReference{Name: "vm-template"}},
		},
	})
	l.claim("cm-claim", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.TemplateRef.Name = "from-cm" })
	mc := l.waitPhase("cm-claim", hypervisorv1alpha1.MachineReady, time.Minute)
	vm, err := l.vm(mc.Status.MachineName)
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
		if err := l.c.List(context.Background(), &list, inNamespace(l.ns)); err != nil {
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
	if err := l.c.DeleteAllOf(context.Background(), &hypervisorv1alpha1.MachineClaim{}, client.InNamespace(l.ns)); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		if err := l.c.List(context.Background(), &list, inNamespace(l.ns)); err != nil {
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
	cfg := testenv.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["remote"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["operator"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["remote"] = &clientcmdapi.Context{Cluster: "remote", AuthInfo: "operator"}
	kc.CurrentContext = "remote"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "remote-kubeconfig", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data:       map[string][]byte{"kubeconfig": data},
	})
	l.create(&hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "kv-remote"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderKubeVirt, CredentialsRef: &meta.LocalObjectReference{Name: "remote-kubeconfig"},
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
		},
	})
	l.create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "remote-ubuntu"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "kv-remote"},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(kubevirtVM)}},
		},
	})
	l.claim("remote-box", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.TemplateRef.Name = "remote-ubuntu" })
	mc := l.waitPhase("remote-box", hypervisorv1alpha1.MachineReady, time.Minute)
	if _, err := l.vm(mc.Status.MachineName); err != nil {
		t.Errorf("the claim's VM is not on the remote cluster: %v", err)
	}
}
