package machineclaim_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/providers/proxmox/proxmoxsim"
)

// One manager, with every reconciler, runs against the package's control
// plane for all tests; each test has its own namespace and its own simulator.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		opts := manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: "hyperfleet-system",
			ObserveInterval: time.Second, FinalizationTimeout: 8 * time.Second, MachineClaimClock: claimClock,
			OrphanSweepInterval: 500 * time.Millisecond, OrphanGrace: 2 * time.Second,
		}
		ctx, cancel := context.WithCancel(context.Background())
		var err error
		if err := kubevirtsim.Install(ctx, testenv.Config()); err != nil {
			cancel()
			return nil, err
		}
		if kvSim, err = kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()}); err != nil {
			cancel()
			return nil, err
		}
		mgr, err := manager.New(testenv.Config(), opts)
		if err != nil {
			cancel()
			return nil, err
		}
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				fmt.Fprintf(os.Stderr, "manager: %v\n", err)
			}
			kvSim.Stop()
		}, nil
	})
}

// claimClock is the MachineClaims' clock: real time plus what the tests
// stepped it by, so a claim's timeout or the finalization deadline passes
// when a test says so instead of being waited out.
var claimClock = &steppedClock{}

type steppedClock struct{ offset atomic.Int64 }

func (c *steppedClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *steppedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Step moves the clock d ahead until t ends, so no later test finds its
// deadlines already past.
func (c *steppedClock) Step(t *testing.T, d time.Duration) {
	c.offset.Add(int64(d))
	t.Cleanup(func() { c.offset.Add(-int64(d)) })
}

// kvSim plays KubeVirt for the package's KubeVirt tests.
var kvSim *kubevirtsim.Simulator

const templateVMID = 9000

// lab is one test's Proxmox: a simulator, its cluster and template objects.
type lab struct {
	t   *testing.T
	ns  string
	sim *proxmoxsim.Server
	c   client.Client
}

type labOption func(*proxmoxsim.Options, *hypervisorv1alpha1.HypervisorCluster)

func newLab(t *testing.T, opts ...labOption) *lab {
	t.Helper()
	simOpts := proxmoxsim.Options{ErrorLog: log.New(io.Discard, "", 0)}
	cluster := &hypervisorv1alpha1.HypervisorCluster{
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
	for _, o := range opts {
		o(&simOpts, cluster)
	}
	sim := proxmoxsim.New(simOpts)
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddTemplate("pve1", templateVMID, "ubuntu-24.04", map[string]string{
		"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"ide2": "local-lvm:vm-9000-cloudinit,media=cdrom", "cores": "1", "memory": "1024", "boot": "order=scsi0;ide2;net0",
	})
	l := &lab{t: t, ns: testenv.Namespace(t), sim: sim, c: testenv.Client()}
	tokenID, secret := sim.APIToken()
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret},
	})
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data:       map[string][]byte{"ca.crt": sim.CACertPEM()},
	})
	cluster.Spec.Endpoint = sim.URL()
	l.create(cluster)
	vmid := int32(templateVMID)
	disk := resource.MustParse("20Gi")
	l.create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Resources:  &hypervisorv1alpha1.MachineResources{CPUCores: 2, DiskSize: &disk},
			CloudInit:  &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPklYEYOAAQ5wdG7Ld42DyDAYdrfAmV+qaWeMTrHZYce ops@example.com"}},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		},
	})
	return l
}

func (l *lab) create(obj client.Object) {
	l.t.Helper()
	obj.SetNamespace(l.ns)
	if err := l.c.Create(context.Background(), obj); err != nil {
		l.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (l *lab) claim(name string, mutate ...func(*hypervisorv1alpha1.MachineClaim)) *hypervisorv1alpha1.MachineClaim {
	mc := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: meta.LocalObjectReference{Name: "ubuntu"}},
	}
	for _, m := range mutate {
		m(mc)
	}
	l.create(mc)
	return mc
}

func (l *lab) get(obj client.Object) error {
	return l.c.Get(context.Background(), client.ObjectKey{Namespace: l.ns, Name: obj.GetName()}, obj)
}

// waitPhase waits for a claim's phase and returns the claim.
func (l *lab) waitPhase(name string, phase hypervisorv1alpha1.MachinePhase, timeout time.Duration) *hypervisorv1alpha1.MachineClaim {
	l.t.Helper()
	mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
	eventually.That(l.t, timeout, func() (bool, string) {
		if err := l.get(mc); err != nil {
			return false, err.Error()
		}
		return mc.Status.Phase == phase, describe(mc.Status.Phase, mc.Status.Conditions)
	})
	return mc
}

// waitCondition waits for obj's Ready condition to have reason.
func (l *lab) waitReason(obj interface {
	client.Object
	meta.ConditionsAccessor
}, reason string, timeout time.Duration) {
	l.t.Helper()
	eventually.That(l.t, timeout, func() (bool, string) {
		if err := l.get(obj); err != nil {
			return false, err.Error()
		}
		c := apimeta.FindStatusCondition(obj.GetConditions(), meta.ReadyCondition)
		return c != nil && c.Reason == reason, describe("", obj.GetConditions())
	})
}

// ownedVMs are the simulator's VMs with HyperFleet's tag.
func (l *lab) ownedVMs() []proxmoxsim.VM {
	var out []proxmoxsim.VM
	for _, vm := range l.sim.VMs() {
		for _, tag := range vm.Tags {
			if tag == "hyperfleet" {
				out = append(out, vm)
				break
			}
		}
	}
	return out
}

func describe(phase hypervisorv1alpha1.MachinePhase, conds []metav1.Condition) string {
	var b strings.Builder
	if phase != "" {
		fmt.Fprintf(&b, "phase %s; ", phase)
	}
	for _, c := range conds {
		fmt.Fprintf(&b, "%s=%s %s: %s; ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func inNamespace(ns string) client.ListOption { return client.InNamespace(ns) }
