package runnerpool_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
)

// The suite on Proxmox: the KubeVirt cases again, with each runner a VM
// cloned on proxmoxsim whose user data travels on the NoCloud ISO. The
// stand-in agent reads its configuration from the ISO the guest booted
// with (proxmoxsim.SeedAtBoot), as cloud-init does, and registers with
// githubsim.

// proxmoxSims maps a Proxmox test's namespace to its simulator, for the
// stand-in agents: the machine to power off, the ISO the guest booted with.
var proxmoxSims sync.Map

func simOf(claim *hypervisorv1alpha1.MachineClaim) (*proxmoxsim.Server, int, bool) {
	v, ok := proxmoxSims.Load(claim.Namespace)
	if !ok || claim.Status.VMID == nil {
		return nil, 0, false
	}
	return v.(*proxmoxsim.Server), int(*claim.Status.VMID), true
}

// guestPowerOff is the agent's poweroff, on whichever hypervisor the claim is.
func guestPowerOff(_ context.Context, claim *hypervisorv1alpha1.MachineClaim) error {
	if _, ok := proxmoxSims.Load(claim.Namespace); ok {
		sim, vmid, ok := simOf(claim)
		if !ok {
			return fmt.Errorf("claim %s has no VMID", claim.Name)
		}
		sim.GuestShutdown(vmid)
		return nil
	}
	return kv.GuestShutdown(claim.Namespace, claim.Status.MachineName)
}

// guestUserData is the user data where the guest finds it: the NoCloud ISO
// a Proxmox VM booted with, or the Secret a KubeVirt VM's volume names.
func guestUserData(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) (string, error) {
	if _, ok := proxmoxSims.Load(claim.Namespace); ok {
		sim, vmid, ok := simOf(claim)
		if !ok {
			return "", fmt.Errorf("claim %s has no VMID", claim.Name)
		}
		seed, ok := sim.SeedAtBoot(vmid)
		if !ok {
			return "", fmt.Errorf("VM %d booted without a NoCloud ISO", vmid)
		}
		return runnersim.NoCloudUserData(seed)
	}
	return runnersim.SecretUserData(ctx, testenv.Client(), claim)
}

// pveLab is a test's namespace with a Proxmox cluster (its own simulator),
// the template "ubuntu" and the GitHub credentials.
type pveLab struct {
	*lab
	sim *proxmoxsim.Server
}

func newProxmoxLab(t *testing.T) *pveLab {
	t.Helper()
	hl := hypervisorlab.Proxmox(t)
	l := &pveLab{lab: &lab{t: t, ns: hl.NS, c: hl.C}, sim: hl.Sim}
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "github-pat", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"token": gh.PAT()},
	})
	proxmoxSims.Store(hl.NS, hl.Sim)
	t.Cleanup(func() { proxmoxSims.Delete(hl.NS) })
	return l
}

// pool makes a pool whose runners are cloned from the Proxmox template.
func (l *pveLab) pool(name string, mutate ...func(*hypervisorv1alpha1.RunnerPool)) *hypervisorv1alpha1.RunnerPool {
	l.t.Helper()
	onProxmox := func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.TemplateRef.Name = "ubuntu" }
	return l.lab.pool(name, append([]func(*hypervisorv1alpha1.RunnerPool){onProxmox}, mutate...)...)
}

// vms counts the simulator's VMs made by HyperFleet.
func (l *pveLab) vms() int {
	n := 0
	for _, vm := range l.sim.VMs() {
		if slices.Contains(vm.Tags, "hyperfleet") {
			n++
		}
	}
	return n
}

// isos lists the cloud-init ISOs on the simulator's storages.
func (l *pveLab) isos() []string {
	var out []string
	for _, node := range []string{"pve1", "pve2", "pve3"} {
		for _, v := range l.sim.Volumes(node, "local", "iso") {
			if strings.HasPrefix(v, "hf-cloudinit-") {
				out = append(out, node+"/"+v)
			}
		}
	}
	return out
}

// gone waits until the pool's runners, VMs, registrations and ISOs are all gone.
func (l *pveLab) gone(name string) {
	l.t.Helper()
	eventually.That(l.t, time.Minute, func() (bool, string) {
		p := l.get(name)
		idleTTLPasses(p)
		return len(l.claims()) == 0 && l.vms() == 0 && registered(name) == 0 && len(l.isos()) == 0,
			fmt.Sprintf("%d claims, %d VMs, %d registered, ISOs %v; %s", len(l.claims()), l.vms(), registered(name), l.isos(), describe(p))
	})
}

// A queued job gets a runner on Proxmox that takes it; after the job the
// runner, its VM and its ISO are gone.
func TestProxmoxQueuedJobGetsARunnerAndTheVMIsGone(t *testing.T) {
	l := newProxmoxLab(t)
	l.pool("single")
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("single")
		return readyReason(p) == "Ready", describe(p)
	})
	id, err := gh.QueueJob(repo, []string{"self-hosted", "linux", "x64", "single"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) { return jobDone(id) })
	if j, _ := gh.Job(id); !strings.HasPrefix(j.RunnerName, "single-") || j.Conclusion != "success" {
		t.Errorf("job ran on %q with conclusion %q", j.RunnerName, j.Conclusion)
	}
	l.gone("single")
}

// Once a runner's VM has booted (its guest agent answers), its NoCloud ISO
// — which held the runner's JIT config — is deleted from storage and its
// CD-ROM emptied, while the runner waits for a job; the agent had read its
// configuration from the ISO at boot, and registered.
func TestProxmoxRunnerISOIsDeletedOnceTheVMBooted(t *testing.T) {
	l := newProxmoxLab(t)
	one := int32(1)
	pool := l.pool("ejected", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Replicas = &one })
	eventually.That(t, time.Minute, func() (bool, string) {
		p := l.get("ejected")
		return p.Status.IdleReplicas == 1 && registered("ejected") == 1, describe(p)
	})
	claim := l.onlyClaim("ejected")
	if claim.Status.VMID == nil {
		t.Fatalf("claim %s has no VMID", claim.Name)
	}
	vmid := int(*claim.Status.VMID)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		vm, _ := l.sim.VM(vmid)
		return vm.Config["ide2"] == "none,media=cdrom" && len(l.isos()) == 0,
			fmt.Sprintf("VM %d ide2 %q, ISOs %v", vmid, vm.Config["ide2"], l.isos())
	})
	seed, ok := l.sim.SeedAtBoot(vmid)
	if !ok {
		t.Fatal("the VM booted without its NoCloud ISO")
	}
	ud, err := runnersim.NoCloudUserData(seed)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := runnerconfig.ParseUserData(ud)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != claim.Name || cfg.JITConfig == "" || cfg.Token != "" {
		t.Errorf("the ISO carried name %q, a JIT config %v, a token %v; want %s's JIT config only", cfg.Name, cfg.JITConfig != "", cfg.Token != "", claim.Name)
	}
	if err := l.c.Delete(rootCtx, pool); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		return len(l.claims()) == 0 && l.vms() == 0 && registered("ejected") == 0,
			fmt.Sprintf("%d claims, %d VMs, %d registered", len(l.claims()), l.vms(), registered("ejected"))
	})
}

// 200 queued jobs scale a Proxmox pool to max and back to min.
func TestProxmoxBurstScalesToMaxAndBack(t *testing.T) {
	l := newProxmoxLab(t)
	l.pool("burst", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.MinReplicas, p.Spec.MaxReplicas = 1, 12 })
	ids := make([]int64, 0, 200)
	for range 200 {
		id, err := gh.QueueJobSpec(githubsim.JobSpec{Repo: repo, Labels: []string{"self-hosted", "burst"}, Duration: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	peak := int32(0)
	eventually.That(t, 5*time.Minute, func() (bool, string) {
		p := l.get("burst")
		peak = max(peak, p.Status.Replicas)
		if p.Status.Replicas > p.Spec.MaxReplicas {
			t.Fatalf("%d runners, above maxReplicas %d", p.Status.Replicas, p.Spec.MaxReplicas)
		}
		done := 0
		for _, id := range ids {
			if ok, _ := jobDone(id); ok {
				done++
			}
		}
		return done == len(ids), fmt.Sprintf("%d of %d jobs done; peak %d; %s", done, len(ids), peak, describe(p))
	})
	if peak != 12 {
		t.Errorf("the pool peaked at %d runners; 200 queued jobs should take it to maxReplicas 12", peak)
	}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		p := l.get("burst")
		idleTTLPasses(p)
		return p.Status.Replicas == 1 && len(l.claims()) == 1 && l.vms() == 1 && registered("burst") <= 1,
			fmt.Sprintf("%d claims, %d VMs, %d registered; %s", len(l.claims()), l.vms(), registered("burst"), describe(p))
	})
	if err := l.c.Delete(rootCtx, l.get("burst")); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		return len(l.claims()) == 0 && l.vms() == 0 && registered("burst") == 0 && len(l.isos()) == 0,
			fmt.Sprintf("%d claims, %d VMs, %d registered, ISOs %v after the pool's deletion", len(l.claims()), l.vms(), registered("burst"), l.isos())
	})
}

// Scale-down never kills a busy runner on Proxmox either.
func TestProxmoxBusyRunnerNeverKilledByScaleDown(t *testing.T) {
	l := newProxmoxLab(t)
	one := int32(1)
	l.pool("busy", func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.Replicas = &one
		p.Spec.IdleTTL = &metav1.Duration{Duration: 0}
	})
	id, err := gh.QueueJobSpec(githubsim.JobSpec{Repo: repo, Labels: []string{"self-hosted", "busy"}, Duration: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		j, _ := gh.Job(id)
		return j.Status == "in_progress", fmt.Sprintf("job %+v", j)
	})
	// A patch, not an update: the pool writes its status meanwhile, and an
	// update from an older read would be refused as a conflict.
	p := l.get("busy")
	before := p.DeepCopy()
	zero := int32(0)
	p.Spec.Replicas = &zero
	if err := l.c.Patch(rootCtx, p, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) { return jobDone(id) })
	if j, _ := gh.Job(id); j.Conclusion != "success" {
		t.Fatalf("the busy runner's job ended %q: it was killed", j.Conclusion)
	}
	l.gone("busy")
}

// A Proxmox runner whose guest never comes up is replaced once its
// registration timeout passes.
func TestProxmoxRegistrationTimeoutReplacesTheRunner(t *testing.T) {
	l := newProxmoxLab(t)
	lat := proxmoxsim.DefaultLatencies()
	lat.Boot = time.Hour // the guest agent never answers: the claim never gets Ready
	l.sim.SetLatencies(lat)
	one := int32(1)
	pool := l.pool("stuck", func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.Replicas = &one
		p.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	defer func() { _ = l.c.Delete(rootCtx, pool) }()
	first := l.onlyClaim("stuck")
	ageClaim(&first, 10*time.Minute+time.Second)
	l.replaced("stuck", first.Name, "RegistrationTimeout")
}

// An idle Proxmox runner past its pool's maxLifetime is retired and replaced.
func TestProxmoxIdleRunnerPastMaxLifetimeIsReplaced(t *testing.T) {
	l := newProxmoxLab(t)
	one := int32(1)
	pool := l.pool("aged", func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.Replicas = &one
		p.Spec.MaxLifetime = &metav1.Duration{Duration: time.Hour}
	})
	defer func() { _ = l.c.Delete(rootCtx, pool) }()
	first := l.onlyClaim("aged")
	eventually.That(t, time.Minute, func() (bool, string) {
		p := l.get("aged")
		return p.Status.IdleReplicas == 1 && readyReason(p) == "Ready", describe(p)
	})
	ageClaim(&first, time.Hour+time.Second)
	l.replaced("aged", first.Name, "")
	if n := registered("aged"); n > 1 {
		t.Errorf("%d runners registered; the retired one's registration should be gone", n)
	}
}
