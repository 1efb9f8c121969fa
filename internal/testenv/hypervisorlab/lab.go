// Package hypervisorlab is what the suites of the hypervisor kinds
// (HypervisorCluster, HypervisorMachineTemplate, the orphan sweeper) share:
// a manager built with the operator's cache rules, the provider registry,
// and per test a "lab" — a Proxmox simulator or a KubeVirt cluster, with its
// HypervisorCluster, credentials and template objects in the test's
// namespace. Each suite wires only the reconcilers it tests.
package hypervisorlab

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
)

// OperatorNamespace is the operator's own namespace in the suites: the only
// one whose Secrets the cache holds.
const OperatorNamespace = "hyperfleet-system"

// TemplateVMID is the Proxmox template VM every lab's simulator holds.
const TemplateVMID = 9000

// SecretTTL is how long the suites' registry reuses a Secret read: short, so
// a test that rotates or deletes a Secret does not wait out production's 10 s.
const SecretTTL = 100 * time.Millisecond

// NewManager builds a manager on the package's control plane with the
// operator's own cache rules (manager.CacheOptions: Secrets only in the
// operator's namespace and with the credentials label; Pods, Services,
// Deployments and ConfigMaps only with the managed-by label), no metrics or
// probe listeners and no leader election; every reconcile bounded by the
// operator's default reconcile timeout.
func NewManager() (ctrl.Manager, error) {
	cacheOpts, err := manager.CacheOptionsFor(testenv.Config(), manager.Options{OperatorNamespace: OperatorNamespace})
	if err != nil {
		return nil, err
	}
	return ctrl.NewManager(testenv.Config(), ctrl.Options{
		Scheme:                 scheme.New(),
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{ReconciliationTimeout: manager.DefaultReconcileTimeout},
	})
}

// Installation is the installation id of the suites' registries: every
// machine their providers make carries it (hf-inst-hf-lab on Proxmox).
const Installation = "hf-lab"

// NewRegistry is the provider registry of a suite, built as the operator
// builds it, for the installation Installation.
func NewRegistry(mgr ctrl.Manager) *hypervisors.Registry {
	return NewInstallationRegistry(mgr, Installation)
}

// NewInstallationRegistry is NewRegistry for another installation: the one
// place the suites construct a registry.
func NewInstallationRegistry(mgr ctrl.Manager, installation string) *hypervisors.Registry {
	return &hypervisors.Registry{
		Credentials: &credentials.Reader{Reader: mgr.GetAPIReader(), TTL: SecretTTL},
		APIReader:   mgr.GetAPIReader(),
		Factories: map[hypervisorv1alpha1.ProviderType]hypervisors.Factory{
			hypervisorv1alpha1.ProviderProxmox: hypervisors.Proxmox(installation),
			hypervisorv1alpha1.ProviderKubeVirt: hypervisors.KubeVirt(hypervisors.LocalCluster{
				Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Installation: installation,
			}),
		},
	}
}

// InstallKubeVirt installs KubeVirt's CRDs, so KubeVirt clusters answer
// their checks.
func InstallKubeVirt(ctx context.Context) error {
	return kubevirtsim.Install(ctx, testenv.Config())
}

// Main is testenv.MainWith for a suite of the hypervisor kinds: once the
// control plane is up it installs KubeVirt's CRDs, builds the manager
// (NewManager) and the registry (NewRegistry), lets wire add the reconcilers
// the suite tests, and runs the manager until the tests end. A suite that
// runs more beside the manager (a simulator) calls testenv.MainWith itself.
func Main(m *testing.M, wire func(mgr ctrl.Manager, registry *hypervisors.Registry) error) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		if err := InstallKubeVirt(context.Background()); err != nil {
			return nil, err
		}
		mgr, err := NewManager()
		if err != nil {
			return nil, err
		}
		if err := wire(mgr, NewRegistry(mgr)); err != nil {
			return nil, err
		}
		return testenv.StartManager(mgr), nil
	})
}

// Lab is one test's hypervisor: a Proxmox simulator (Sim) or a KubeVirt
// cluster (Sim nil), its HypervisorCluster and template objects.
type Lab struct {
	T   *testing.T
	NS  string
	Sim *proxmoxsim.Server
	C   client.Client
}

// Option changes a Proxmox lab's simulator or cluster before they start.
type Option func(*proxmoxsim.Options, *hypervisorv1alpha1.HypervisorCluster)

// Proxmox starts a simulator with a template VM and makes, in a fresh
// namespace, its token and CA Secrets, the HypervisorCluster "pve" (checked
// every second) and the HypervisorMachineTemplate "ubuntu".
func Proxmox(t *testing.T, opts ...Option) *Lab {
	t.Helper()
	simOpts := proxmoxsim.Options{ErrorLog: log.New(io.Discard, "", 0)}
	cluster := proxmoxCluster()
	for _, o := range opts {
		o(&simOpts, cluster)
	}
	sim := proxmoxsim.New(simOpts)
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddTemplate("pve1", TemplateVMID, "ubuntu-24.04", map[string]string{
		"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"ide2": "local-lvm:vm-9000-cloudinit,media=cdrom", "cores": "1", "memory": "1024", "boot": "order=scsi0;ide2;net0",
	})
	return proxmoxLab(t, sim, cluster)
}

// ProxmoxSharing makes another lab on other's simulator, in a fresh
// namespace with its own Secrets, cluster "pve" and template "ubuntu": what
// a second installation sharing one Proxmox has.
func ProxmoxSharing(t *testing.T, other *Lab) *Lab {
	t.Helper()
	return proxmoxLab(t, other.Sim, proxmoxCluster())
}

func proxmoxCluster() *hypervisorv1alpha1.HypervisorCluster {
	return &hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pve"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider:            hypervisorv1alpha1.ProviderProxmox,
			CredentialsRef:      &meta.LocalObjectReference{Name: "pve-token"},
			TLS:                 &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "pve-ca", Key: "ca.crt"}},
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
			Proxmox: &hypervisorv1alpha1.ProxmoxClusterSpec{
				DefaultBridge: "vmbr0", MaxConcurrentClonesPerNode: 4, MaxConcurrentClonesPerStorage: 4,
				TaskTimeout: &metav1.Duration{Duration: time.Minute},
			},
		},
	}
}

// proxmoxLab makes, in a fresh namespace, sim's token and CA Secrets, the
// cluster and the template "ubuntu".
func proxmoxLab(t *testing.T, sim *proxmoxsim.Server, cluster *hypervisorv1alpha1.HypervisorCluster) *Lab {
	t.Helper()
	l := &Lab{T: t, NS: testenv.Namespace(t), Sim: sim, C: testenv.Client()}
	tokenID, secret := sim.APIToken()
	l.Create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret},
	})
	l.Create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data:       map[string][]byte{"ca.crt": sim.CACertPEM()},
	})
	cluster.Spec.Endpoint = sim.URL()
	l.Create(cluster)
	vmid := int32(TemplateVMID)
	disk := resource.MustParse("20Gi")
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Resources:  &hypervisorv1alpha1.MachineResources{CPUCores: 2, DiskSize: &disk},
			CloudInit:  &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{SSHKey}},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		},
	})
	return l
}

// SSHKey is the key the labs' templates authorize.
const SSHKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPklYEYOAAQ5wdG7Ld42DyDAYdrfAmV+qaWeMTrHZYce ops@example.com"

// KubeVirtVM is the VirtualMachine the KubeVirt labs' template holds.
const KubeVirtVM = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"labels":{"app":"runner"}},
"spec":{"template":{"spec":{"domain":{"devices":{"disks":[{"name":"root","disk":{"bus":"virtio"}}]},
"resources":{"requests":{"memory":"1Gi"}}},"volumes":[{"name":"root","containerDisk":{"image":"quay.io/containerdisks/ubuntu:24.04"}}]}}}}`

// KubeVirt makes, in a fresh namespace, the HypervisorCluster "kv" (this
// API server, checked every second) and the HypervisorMachineTemplate
// "ubuntu".
func KubeVirt(t *testing.T) *Lab {
	t.Helper()
	l := &Lab{T: t, NS: testenv.Namespace(t), C: testenv.Client()}
	l.Create(&hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "kv"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider:            hypervisorv1alpha1.ProviderKubeVirt,
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
			KubeVirt:            &hypervisorv1alpha1.KubeVirtClusterSpec{Labels: map[string]hypervisorv1alpha1.LabelValue{"team": "ci"}},
		},
	})
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "kv"},
			Resources:  &hypervisorv1alpha1.MachineResources{CPUCores: 2},
			CloudInit:  &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{SSHKey}},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(KubeVirtVM)}},
		},
	})
	return l
}

// AsTenant makes the lab's client, for everything the test does from now
// on, the tenant of its namespace as the threat model has it
// (testenv.Tenant): a test of the tenant boundary creates its hostile
// objects with no more rights than a tenant holds.
func (l *Lab) AsTenant() *Lab {
	l.T.Helper()
	l.C = testenv.Tenant(l.T, l.NS)
	return l
}

// UpdateToken writes secret as the token secret in the lab's credentials
// Secret "pve-token", as an operator rotating the Proxmox token would.
func (l *Lab) UpdateToken(secret string) {
	l.T.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token"}}
	if err := l.Get(s); err != nil {
		l.T.Fatal(err)
	}
	s.Data["tokenSecret"] = []byte(secret)
	if err := l.C.Update(context.Background(), s); err != nil {
		l.T.Fatal(err)
	}
}

// RemoteKubeVirt makes the HypervisorCluster cluster, reaching this API
// server as a remote KubeVirt through a kubeconfig in its credentials
// Secret "<cluster>-kubeconfig" (KubeconfigSecret), checked every second,
// and the template template on it (KubeVirtVM).
func (l *Lab) RemoteKubeVirt(cluster, template string) {
	l.T.Helper()
	secret := cluster + "-kubeconfig"
	l.KubeconfigSecret(secret)
	l.Create(&hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: cluster},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderKubeVirt, CredentialsRef: &meta.LocalObjectReference{Name: secret},
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
		},
	})
	l.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: template},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: cluster},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(KubeVirtVM)}},
		},
	})
}

// KubeconfigSecret makes the credentials Secret name, holding under
// "kubeconfig" a kubeconfig for this API server addressed as a remote
// cluster would be: so a test reaches a "remote" KubeVirt without a second
// control plane.
func (l *Lab) KubeconfigSecret(name string) {
	l.T.Helper()
	data, err := testenv.Kubeconfig()
	if err != nil {
		l.T.Fatal(err)
	}
	l.Create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data:       map[string][]byte{"kubeconfig": data},
	})
}

// Create makes obj in the lab's namespace, failing the test if it cannot.
// A 503 is tried again for up to half a minute: an API server whose CRDs
// were just created again answers creates of their kinds with "Resource
// kind … not found" from its admission policies until their type checker
// has caught up, and that refusal says to try later.
func (l *Lab) Create(obj client.Object) {
	l.T.Helper()
	obj.SetNamespace(l.NS)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := l.C.Create(context.Background(), obj)
		if err == nil {
			return
		}
		if !apierrors.IsServiceUnavailable(err) || time.Now().After(deadline) {
			l.T.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Get reads obj, by its name, from the lab's namespace.
func (l *Lab) Get(obj client.Object) error {
	return l.C.Get(context.Background(), client.ObjectKey{Namespace: l.NS, Name: obj.GetName()}, obj)
}

// WaitReason waits for obj's Ready condition to have reason, and leaves obj
// as last read.
func (l *Lab) WaitReason(obj interface {
	client.Object
	meta.ConditionsAccessor
}, reason string, timeout time.Duration) {
	l.T.Helper()
	eventually.That(l.T, timeout, func() (bool, string) {
		if err := l.Get(obj); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(obj.GetConditions(), meta.ReadyCondition)
		return c != nil && c.Reason == reason, Describe("", obj.GetConditions())
	})
}

// OwnedVMs are the simulator's VMs with HyperFleet's tag.
func (l *Lab) OwnedVMs() []proxmoxsim.VM {
	var out []proxmoxsim.VM
	for _, vm := range l.Sim.VMs() {
		for _, tag := range vm.Tags {
			if tag == "hyperfleet" {
				out = append(out, vm)
				break
			}
		}
	}
	return out
}

// VM reads a KubeVirt VirtualMachine of the lab's namespace.
func (l *Lab) VM(name string) (*kubevirtv1.VirtualMachine, error) {
	vm := &kubevirtv1.VirtualMachine{}
	return vm, l.C.Get(context.Background(), client.ObjectKey{Namespace: l.NS, Name: name}, vm)
}

// Describe renders a phase and conditions for a failure message.
func Describe(phase hypervisorv1alpha1.MachinePhase, conds []metav1.Condition) string {
	var b strings.Builder
	if phase != "" {
		fmt.Fprintf(&b, "phase %s; ", phase)
	}
	for _, c := range conds {
		fmt.Fprintf(&b, "%s=%s %s: %s; ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// ReadyCondition returns the Ready condition of conds, or a zero one.
func ReadyCondition(conds []metav1.Condition) metav1.Condition {
	if c := apimeta.FindStatusCondition(conds, meta.ReadyCondition); c != nil {
		return *c
	}
	return metav1.Condition{}
}
