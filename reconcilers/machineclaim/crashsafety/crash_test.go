package crashsafety_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m)
}

// startInstance runs one operator process the test can kill
// (testenv.Process).
func startInstance(t *testing.T) *testenv.Process {
	t.Helper()
	p, err := testenv.StartProcess(func(cfg *rest.Config) (testenv.Runnable, error) {
		return manager.New(cfg, operatorOptions())
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// operatorOptions are every instance's: the whole operator, observing
// every second.
func operatorOptions() manager.Options {
	return manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: "default",
		ObserveInterval: time.Second, FinalizationTimeout: time.Minute,
		// No sweeping here: every VM must be accounted for by its claim alone.
		OrphanSweepInterval: time.Hour, OrphanGrace: time.Hour,
		SkipControllerNameValidation: true,
	}
}

func TestEveryClaimEndsWithExactlyOneVMDespiteCrashes(t *testing.T) {
	lat := proxmoxsim.DefaultLatencies()
	lat.Clone = 400 * time.Millisecond // long enough for kills to land mid-clone
	ns, sim := proxmoxNamespace(t, lat, nil)
	c := testenv.Client()
	ctx := context.Background()
	// Claims arrive two per round, so every round has some at their start
	// (choosing a VMID, cloning) when the operator dies.
	const rounds, perRound = 12, 2
	const claims = rounds * perRound
	newClaim := func(i int) {
		mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%02d", i), Namespace: ns},
			Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}}}
		if err := c.Create(ctx, mc); err != nil {
			t.Fatal(err)
		}
	}

	// Kill the operator at random moments, restart it, again and again.
	rng := rand.New(rand.NewPCG(42, 7)) // fixed seed: reproducible crash points
	for round := range rounds {
		for i := range perRound {
			newClaim(round*perRound + i)
		}
		in := startInstance(t)
		life := time.Duration(150+rng.IntN(400)) * time.Millisecond
		time.Sleep(life) // the crash point: how long this instance lives
		in.Kill()
		var list hypervisorv1alpha1.MachineClaimList
		_ = c.List(ctx, &list, client.InNamespace(ns))
		recorded, cloning := 0, 0
		for _, mc := range list.Items {
			if mc.Status.VMID != nil {
				recorded++
			}
		}
		for _, vm := range sim.VMs() {
			if vm.Lock == "clone" {
				cloning++
			}
		}
		t.Logf("round %2d: killed after %s: %2d claims had a VMID recorded, %2d VMs exist, %2d mid-clone",
			round, life, recorded, len(sim.VMs())-1, cloning)
	}

	final := startInstance(t)
	defer final.Kill()
	eventually.That(t, 4*time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		ready := 0
		var stuck []string
		for _, mc := range list.Items {
			if mc.Status.Phase == hypervisorv1alpha1.MachineReady {
				ready++
				continue
			}
			var why []string
			for _, c := range mc.Status.Conditions {
				why = append(why, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
			}
			stuck = append(stuck, fmt.Sprintf("%s (VMID %v, phase %q): %s", mc.Name, ptr(mc.Status.VMID), mc.Status.Phase, strings.Join(why, "; ")))
		}
		return ready == claims, fmt.Sprintf("%d of %d Ready; not Ready: %s", ready, claims, strings.Join(stuck, " | "))
	})

	var list hypervisorv1alpha1.MachineClaimList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	perOwner := map[string]int{}
	others := 0
	for _, vm := range sim.VMs() {
		if vm.Template {
			continue
		}
		owner := ""
		for _, tag := range vm.Tags {
			if strings.HasPrefix(tag, "hf-owner-") {
				owner = strings.TrimPrefix(tag, "hf-owner-")
			}
		}
		if owner == "" {
			others++
			t.Errorf("VM %d (%s, lock %q) has no owner tag: a twin or half-made VM", vm.VMID, vm.Name, vm.Lock)
			continue
		}
		perOwner[owner]++
	}
	for _, mc := range list.Items {
		if n := perOwner[string(mc.UID)]; n != 1 {
			t.Errorf("claim %s has %d VMs, want exactly 1", mc.Name, n)
		}
		vm, ok := sim.VM(int(*mc.Status.VMID))
		if !ok || vm.Name != mc.Status.MachineName {
			t.Errorf("claim %s records VMID %d, which is %+v", mc.Name, *mc.Status.VMID, vm)
		}
	}
	if len(perOwner) != claims || others != 0 {
		t.Errorf("%d owners and %d unowned VMs for %d claims", len(perOwner), others, claims)
	}
}

func ptr(p *int32) any {
	if p == nil {
		return "none"
	}
	return *p
}

// proxmoxNamespace is a new namespace with a Proxmox simulator, its
// cluster "pve" and its template "ubuntu" (keeping standby machines when
// standbySpec is set).
func proxmoxNamespace(t *testing.T, lat proxmoxsim.Latencies, standbySpec *hypervisorv1alpha1.StandbySpec) (string, *proxmoxsim.Server) {
	t.Helper()
	ns := testenv.Namespace(t)
	c := testenv.Client()
	ctx := context.Background()
	sim := proxmoxsim.New(proxmoxsim.Options{Latencies: lat, StorageLockLimit: -1, ErrorLog: log.New(io.Discard, "", 0)})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddTemplate("pve1", 9000, "ubuntu", map[string]string{"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio,bridge=vmbr0"})
	tokenID, secret := sim.APIToken()
	labels := map[string]string{meta.CredentialsLabel: "true"}
	vmid := int32(9000)
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token", Labels: labels}, StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca", Labels: labels}, Data: map[string][]byte{"ca.crt": sim.CACertPEM()}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}, Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderProxmox, Endpoint: sim.URL(), CredentialsRef: &meta.LocalObjectReference{Name: "token"},
			TLS:     &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "ca", Key: "ca.crt"}},
			Proxmox: &hypervisorv1alpha1.ProxmoxClusterSpec{MaxConcurrentClonesPerNode: 8, MaxConcurrentClonesPerStorage: 8},
		}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}, Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
			Standby:    standbySpec,
		}},
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return ns, sim
}
