package chaos

import (
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/controlplane"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/kustomize/crd"
)

const (
	// operatorNamespace holds the Lease.
	operatorNamespace = "hyperfleet-system"
	// workNamespace holds the clusters, templates, claims and KubeVirt VMs.
	workNamespace = "chaos"
	// The clusters and their templates.
	pveCluster, pveTemplate = "pve", "pve-ubuntu"
	kvCluster, kvTemplate   = "kv", "kv-ubuntu"
	// templateVMID is the Proxmox template every claim is cloned from.
	templateVMID = 9000
	// isoStorage receives the user-data ISOs (the provider's default).
	isoStorage = "local"
	sshKey     = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPklYEYOAAQ5wdG7Ld42DyDAYdrfAmV+qaWeMTrHZYce ops@example.com"
	kubevirtVM = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"labels":{"app":"chaos"}},
"spec":{"template":{"spec":{"domain":{"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}]},
"resources":{"requests":{"memory":"1Gi"}}},"volumes":[{"name":"root","containerDisk":{"image":"quay.io/containerdisks/ubuntu:24.04"}}]}}}}`
)

// env is what the operator runs against: the control plane, both
// simulators, and an uncached admin client for the harness.
type env struct {
	dir        string
	kubeconfig string
	c          client.Client
	pve        *proxmoxsim.Server
	kv         *kubevirtsim.Simulator
}

// startEnv brings the control plane and the simulators up, with the CRDs,
// both clusters and their templates; b.Cleanup tears it all down.
func startEnv(b *testing.B, ctx context.Context) *env {
	b.Helper()
	// Kept after the run: the operator logs are what a failure is read from.
	dir, err := os.MkdirTemp("", "hyperfleet-chaos-")
	if err != nil {
		b.Fatal(err)
	}
	bins, err := controlplane.BinaryDir(ctx, os.Stderr)
	if err != nil {
		b.Fatal(err)
	}
	crds, err := crd.CRDs()
	if err != nil {
		b.Fatal(err)
	}
	plane, err := controlplane.Start(controlplane.Options{BinaryDir: bins, CRDs: append(crds, kubevirtsim.CRDs()...)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = plane.Stop() })
	e := &env{dir: dir, kubeconfig: filepath.Join(dir, "kubeconfig")}
	if err := plane.WriteKubeconfig(e.kubeconfig); err != nil {
		b.Fatal(err)
	}
	// The logs stay; the admin credentials go with the control plane.
	b.Cleanup(func() { _ = os.Remove(e.kubeconfig) })
	if e.c, err = client.New(plane.Config, client.Options{Scheme: scheme.New()}); err != nil {
		b.Fatal(err)
	}

	// Realistic Proxmox timing: the ISO upload takes a second, a clone two,
	// so a kill aimed at either lands inside it.
	e.pve = proxmoxsim.New(proxmoxsim.Options{Latencies: proxmoxsim.Realistic(), StorageLockLimit: 4, ErrorLog: log.New(io.Discard, "", 0)})
	if err := e.pve.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.pve.Close)
	e.pve.AddTemplate("pve1", templateVMID, "ubuntu-24.04", map[string]string{
		"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio=BC:24:11:00:90:00,bridge=vmbr0",
		"ide2": "local-lvm:vm-9000-cloudinit,media=cdrom", "cores": "1", "memory": "1024", "boot": "order=scsi0;ide2;net0",
	})
	// KubeVirt's realistic 25-second boot would make each claim's life long
	// and the kills few per claim; seconds keep every phase observable.
	kvLat := kubevirtsim.Latencies{Pending: 200 * time.Millisecond, Scheduling: time.Second, Scheduled: time.Second,
		Boot: 3 * time.Second, Shutdown: 2 * time.Second, StartFailureBackoff: 2 * time.Second}
	if e.kv, err = kubevirtsim.Start(ctx, plane.Config, kubevirtsim.Options{Latencies: kvLat, Logger: logr.Discard()}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.kv.Stop)

	for _, ns := range []string{operatorNamespace, workNamespace} {
		e.create(b, ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	for _, o := range e.objects() {
		o.SetNamespace(workNamespace)
		e.create(b, ctx, o)
	}
	return e
}

func (e *env) create(b *testing.B, ctx context.Context, o client.Object) {
	b.Helper()
	if err := e.c.Create(ctx, o); err != nil {
		b.Fatalf("creating %T %s: %v", o, o.GetName(), err)
	}
}

// objects are what a user writes for the two clusters: the Proxmox token
// and CA Secrets, a HypervisorCluster and a template on each.
func (e *env) objects() []client.Object {
	tokenID, secret := e.pve.APIToken()
	creds := map[string]string{meta.CredentialsLabel: "true"}
	vmid := int32(templateVMID)
	disk := resource.MustParse("20Gi")
	cloudInit := &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{sshKey}}
	check := &metav1.Duration{Duration: 5 * time.Second}
	return []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Labels: creds},
			StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Labels: creds},
			Data: map[string][]byte{"ca.crt": e.pve.CACertPEM()}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: pveCluster}, Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderProxmox, Endpoint: e.pve.URL(), HealthCheckInterval: check,
			CredentialsRef: &meta.LocalObjectReference{Name: "pve-token"},
			TLS:            &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "pve-ca", Key: "ca.crt"}},
			Proxmox: &hypervisorv1alpha1.ProxmoxClusterSpec{DefaultBridge: "vmbr0", MaxConcurrentClonesPerNode: 4, MaxConcurrentClonesPerStorage: 4,
				TaskTimeout: &metav1.Duration{Duration: time.Minute}},
		}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: pveTemplate}, Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: pveCluster},
			Resources:  &hypervisorv1alpha1.MachineResources{CPUCores: 2, DiskSize: &disk},
			CloudInit:  cloudInit,
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: kvCluster}, Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderKubeVirt, HealthCheckInterval: check,
			KubeVirt: &hypervisorv1alpha1.KubeVirtClusterSpec{},
		}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: kvTemplate}, Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: kvCluster},
			Resources:  &hypervisorv1alpha1.MachineResources{CPUCores: 2},
			CloudInit:  cloudInit,
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(kubevirtVM)}},
		}},
	}
}
