package proxmox

import (
	"context"
	"errors"
	"io"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/providers"
)

// cloneSim starts a simulator with one template (9000 on pve1, local
// storage, so every clone is a linked one on pve1) and returns it with a
// function making fresh providers on it: a fresh provider is what a restart,
// a failover or a rebuilt HypervisorCluster gives.
func cloneSim(t *testing.T, lat proxmoxsim.Latencies, tweak func(*Config)) (*proxmoxsim.Server, func() *Provider) {
	t.Helper()
	sim := proxmoxsim.New(proxmoxsim.Options{Latencies: lat, ErrorLog: log.New(io.Discard, "", 0)})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddTemplate("pve1", 9000, "ubuntu-2404", nil)
	id, secret := sim.APIToken()
	return sim, func() *Provider {
		cfg := Config{Endpoint: sim.URL(), TokenID: id, TokenSecret: secret, CAPEM: sim.CACertPEM(), RequestTimeout: 5 * time.Second, Installation: "inst-a"}
		if tweak != nil {
			tweak(&cfg)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func cloneSpec(uid string, vmid int) providers.MachineSpec {
	return providers.MachineSpec{
		Ref:     providers.MachineRef{Name: "hf-" + uid[:8], VMID: vmid},
		Owner:   providers.Owner{UID: uid, Namespace: "ci", Name: "claim-" + uid[:8]},
		Proxmox: &providers.ProxmoxSpec{SourceVMID: 9000},
	}
}

// until calls step until it reports done; it fails the test after many
// calls, never on how long one took.
func until(t *testing.T, what string, step func() bool) {
	t.Helper()
	for range 3000 {
		if step() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// vmsOf counts the simulator's VMs whose description names owner uid.
func vmsOf(sim *proxmoxsim.Server, uid string) []int {
	var out []int
	for _, vm := range sim.VMs() {
		if strings.Contains(vm.Description, ownerDescription+uid) {
			out = append(out, vm.VMID)
		}
	}
	return out
}

func cloneTasks(sim *proxmoxsim.Server) int {
	n := 0
	for _, task := range sim.Tasks() {
		if task.Type == "qmclone" {
			n++
		}
	}
	return n
}

// A clone started by the previous leader shows its temporary config only
// after the call answered. The new leader looked before it appeared (the
// VMID was free, as Proxmox says during the lag) and its clone call is then
// refused with "config file already exists": that is our clone in progress,
// not a VMID someone else holds, so no new VMID and no twin.
func TestLaggingCloneConfigMakesNoTwin(t *testing.T) {
	lat := proxmoxsim.DefaultLatencies()
	lat.CloneConfigLag = 20 * time.Millisecond
	lat.Clone = 2 * time.Second // the temporary config stays long enough to look at
	sim, fresh := cloneSim(t, lat, nil)
	spec := cloneSpec("6f1c2d3e-0000-4000-8000-000000000001", 100123)
	ctx := context.Background()

	old := fresh()
	if m, err := old.Create(ctx, spec); err != nil || m.Progress != "cloning" {
		t.Fatalf("first Create = %+v, %v", m, err)
	}
	until(t, "the temporary clone config", func() bool {
		vm, ok := sim.VM(spec.Ref.VMID)
		return ok && vm.Lock == "clone"
	})
	if vm, _ := sim.VM(spec.Ref.VMID); vm.Description != " qmclone temporary file\n" {
		t.Logf("the full config is already written (still clone-locked): %q", vm.Description)
	}

	// The new leader's look happened during the lag: /cluster/nextid said
	// the VMID was free. The fault answers exactly that, once.
	if err := sim.InjectFault(proxmoxsim.Fault{Operation: proxmoxsim.OpNextID, Times: 1, Action: proxmoxsim.FaultHTTPError,
		Status: 200, Message: "OK", Body: `{"data":"100123"}`}); err != nil {
		t.Fatal(err)
	}
	leader := fresh()
	m, err := leader.Create(ctx, spec)
	if err != nil || m.Progress != "cloning" {
		t.Fatalf("Create on the new leader = %+v, %v; want our clone in progress", m, err)
	}
	if sim.PendingFaults() != 0 || cloneTasks(sim) != 1 {
		t.Fatalf("the new leader's look did not see a free VMID (faults left %d) or its clone was accepted (%d clone tasks)",
			sim.PendingFaults(), cloneTasks(sim))
	}
	until(t, "the machine to be made", func() bool {
		m, err := leader.Create(ctx, spec)
		if errors.Is(err, providers.ErrNameTaken) {
			t.Fatalf("Create = %v", err)
		}
		return err == nil && m.Provisioned
	})
	if got := vmsOf(sim, spec.Owner.UID); len(got) != 1 || got[0] != spec.Ref.VMID {
		t.Fatalf("the owner's VMs = %v, want only %d", got, spec.Ref.VMID)
	}
}

// A retry during the lag itself (a new leader sees no config at all) makes
// a second clone call, which Proxmox accepts; its worker then fails on the
// VMID's lock. The retry reports that failure, then finds the first clone.
func TestCloneRetryDuringTheLagMakesNoTwin(t *testing.T) {
	lat := proxmoxsim.DefaultLatencies()
	lat.CloneConfigLag = 300 * time.Millisecond
	sim, fresh := cloneSim(t, lat, nil)
	spec := cloneSpec("6f1c2d3e-0000-4000-8000-000000000002", 100124)
	ctx := context.Background()
	if _, err := fresh().Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	leader := fresh()
	until(t, "the machine to be made", func() bool {
		m, err := leader.Create(ctx, spec)
		if errors.Is(err, providers.ErrNameTaken) {
			t.Fatalf("Create = %v", err)
		}
		return err == nil && m.Provisioned
	})
	if got := vmsOf(sim, spec.Owner.UID); len(got) != 1 || got[0] != spec.Ref.VMID {
		t.Fatalf("the owner's VMs = %v, want only %d", got, spec.Ref.VMID)
	}
}

// "already exists" from a step other than the clone call (here a config
// update after the clone, the tagging before the start, refused with a
// volume's "already exists") is a transient error, not a taken VMID: the
// claim keeps its VM.
func TestAlreadyExistsOutsideTheCloneIsNotNameTaken(t *testing.T) {
	sim, fresh := cloneSim(t, proxmoxsim.DefaultLatencies(), nil)
	p := fresh()
	spec := cloneSpec("6f1c2d3e-0000-4000-8000-000000000003", 100125)
	ctx := context.Background()
	if _, err := p.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// Seen finished by the node's watcher: the next Create configures.
	until(t, "the clone to finish", func() bool {
		_, busy := p.pending(spec.Ref.VMID)
		return !busy
	})
	if err := sim.InjectFault(proxmoxsim.Fault{Operation: proxmoxsim.OpConfigSet, Times: 1, Action: proxmoxsim.FaultHTTPError,
		Status: 500, Message: "unable to create VM disk: volume 'local-lvm:vm-100125-cloudinit' already exists"}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Create(ctx, spec)
	var tr *providers.TransientError
	if err == nil || errors.Is(err, providers.ErrNameTaken) || !errors.As(err, &tr) {
		t.Fatalf("Create with a configure step failing = %v; want a transient error, not ErrNameTaken", err)
	}
	if sim.PendingFaults() != 0 {
		t.Fatal("Create did not reach the configure step")
	}
	until(t, "the machine to be made", func() bool {
		m, err := p.Create(ctx, spec)
		return err == nil && m.Provisioned
	})
	if got := vmsOf(sim, spec.Owner.UID); len(got) != 1 || got[0] != spec.Ref.VMID {
		t.Fatalf("the owner's VMs = %v, want only %d", got, spec.Ref.VMID)
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A clone task whose status cannot be read (its node went offline) keeps
// its slot only until the task timeout, not for ever. The node's watcher is
// driven by hand (pollNode), so the test decides when it looks.
func TestUnreadableCloneTaskReleasesItsSlotAtTheTimeout(t *testing.T) {
	sim, fresh := cloneSim(t, proxmoxsim.DefaultLatencies(), func(c *Config) { c.TaskTimeout = time.Minute; c.TaskPollInterval = time.Hour })
	p := fresh()
	clock := &fakeClock{now: time.Now()}
	p.now = clock.Now
	spec := cloneSpec("6f1c2d3e-0000-4000-8000-000000000004", 100126)
	ctx := context.Background()
	if m, err := p.Create(ctx, spec); err != nil || m.Progress != "cloning" || !m.WillWake {
		t.Fatalf("Create = %+v, %v", m, err)
	}
	if p.admission.inFlight() != 1 {
		t.Fatalf("slots in use = %d, want 1", p.admission.inFlight())
	}
	// pveproxy's answer for a node it cannot reach.
	if err := sim.InjectFault(proxmoxsim.Fault{Operation: proxmoxsim.OpTaskList, Action: proxmoxsim.FaultHTTPError,
		Status: 595, Message: "No route to host"}); err != nil {
		t.Fatal(err)
	}
	p.pollNode("pve1")
	if p.admission.inFlight() != 1 {
		t.Fatal("the slot was released before the task timeout")
	}
	if _, busy := p.pending(spec.Ref.VMID); !busy {
		t.Fatal("an unread task counts as ended")
	}
	clock.Add(time.Minute + time.Second)
	p.pollNode("pve1")
	if n := p.admission.inFlight(); n != 0 {
		t.Fatalf("slots in use after the task timeout = %d, want 0", n)
	}
	_, err := p.Create(ctx, spec)
	var tr *providers.TransientError
	if !errors.As(err, &tr) || tr.Reason != "TaskTimedOut" {
		t.Fatalf("Create past the task timeout = %v; want TaskTimedOut", err)
	}
	if _, busy := p.pending(spec.Ref.VMID); busy {
		t.Fatal("the timed-out task is still watched")
	}
}

// A fresh provider (after a restart, a failover or a rebuild) counts the
// clones still running on Proxmox under its user before it starts one, so
// the per-node limit holds; a clone running past the task timeout no longer
// counts.
func TestAdmissionRebuiltFromRunningTasks(t *testing.T) {
	lat := proxmoxsim.DefaultLatencies()
	lat.Clone = time.Hour // still running when the new provider looks
	sim, fresh := cloneSim(t, lat, func(c *Config) { c.MaxClonesPerNode = 1; c.TaskTimeout = time.Hour; c.TaskPollInterval = time.Hour })
	ctx := context.Background()
	if _, err := fresh().Create(ctx, cloneSpec("6f1c2d3e-0000-4000-8000-000000000005", 100127)); err != nil {
		t.Fatal(err)
	}
	p := fresh()
	clock := &fakeClock{now: time.Now()}
	p.now = clock.Now
	second := cloneSpec("6f1c2d3e-0000-4000-8000-000000000006", 100128)
	_, err := p.Create(ctx, second)
	if !errors.Is(err, providers.ErrQueued) {
		t.Fatalf("Create on a fresh provider with pve1's clone slot taken = %v; want ErrQueued", err)
	}
	if p.admission.inFlight() != 1 || cloneTasks(sim) != 1 {
		t.Fatalf("restored slots %d, clone tasks %d; want 1 and 1", p.admission.inFlight(), cloneTasks(sim))
	}
	// Past the task timeout the old clone no longer counts (its node may be
	// gone); the node's watcher, driven by hand here, gives its slot back.
	clock.Add(time.Hour + time.Minute)
	p.pollNode("pve1")
	m, err := p.Create(ctx, second)
	if err != nil || m.Progress != "cloning" {
		t.Fatalf("Create after the old clone's timeout = %+v, %v", m, err)
	}
	if cloneTasks(sim) != 2 {
		t.Fatalf("clone tasks = %d, want 2", cloneTasks(sim))
	}
}

// Restored slots are given back once a listing no longer shows their task
// running, and count against the node and storage like any other.
func TestAdmissionRestore(t *testing.T) {
	a := newAdmission(1, 4)
	a.restore(map[string]slot{"UPID:a": {node: "pve1", storage: "template-pve1"}})
	if a.free("pve1", "template-pve1") || a.tryAcquire(100200, "pve1", "template-pve1") {
		t.Fatal("a restored slot does not count against its node")
	}
	if !a.tryAcquire(100201, "pve2", "template-pve1") {
		t.Fatal("another node is refused")
	}
	a.endRestored("UPID:a")
	if !a.free("pve1", "template-pve1") || a.inFlight() != 1 {
		t.Fatalf("after the task ended: free %v, in flight %d", a.free("pve1", "template-pve1"), a.inFlight())
	}
}

// A slot that comes free goes to the longest-waiting request (by the time
// its owner asked, not the order it asked in), is kept for it, and its owner
// is woken; a newer request cannot take it meanwhile.
func TestAdmissionServesTheLongestWaitingFirst(t *testing.T) {
	a := newAdmission(1, 10)
	var woken []string
	a.wake = func(o providers.Owner) { woken = append(woken, o.Name) }
	t0 := time.Now()
	req := func(vmid int, name string, since time.Duration) waiter {
		return waiter{vmid: vmid, owner: providers.Owner{UID: name, Namespace: "ci", Name: name}, since: t0.Add(since),
			nodes: []string{"pve1"}, storage: "ceph"}
	}
	if _, ok := a.admit(req(100, "first", 0), true); !ok {
		t.Fatal("the first request must get the free slot")
	}
	// The youngest asks first, then an older one.
	for _, w := range []waiter{req(102, "third", 2*time.Second), req(101, "second", time.Second)} {
		if _, ok := a.admit(w, true); ok {
			t.Fatalf("%s was admitted past the limit", w.owner.Name)
		}
	}
	a.release(100)
	if len(woken) != 1 || woken[0] != "second" {
		t.Fatalf("woken on release = %v, want [second]", woken)
	}
	if _, ok := a.admit(req(102, "third", 2*time.Second), true); ok {
		t.Fatal("a newer request took the slot kept for the longest-waiting one")
	}
	if n, ok := a.admit(req(101, "second", time.Second), true); !ok || n != "pve1" {
		t.Fatalf("the woken request was refused its slot: %q, %v", n, ok)
	}
	a.release(101)
	if len(woken) != 2 || woken[1] != "third" || a.queued() != 1 {
		t.Fatalf("woken = %v, queued %d; want [second third], 1", woken, a.queued())
	}
	// A withdrawn request gives its kept slot back.
	a.withdraw(102)
	if a.queued() != 0 || !a.free("pve1", "ceph") {
		t.Fatalf("after withdrawing: queued %d, free %v", a.queued(), a.free("pve1", "ceph"))
	}
}
