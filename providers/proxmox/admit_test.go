package proxmox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/providers"
)

// Admit makes nothing. With a slot free it reserves it, so a request
// admitted just after queues at once rather than after recording its
// reference. With the node's one clone slot taken, it queues the request
// exactly as Create would: the request is woken when the slot is free, and
// its Create then clones.
func TestAdmitQueuesWithoutMakingAnything(t *testing.T) {
	lat := proxmoxsim.DefaultLatencies()
	lat.Clone = 2 * time.Second
	sim, fresh := cloneSim(t, lat, func(c *Config) { c.MaxClonesPerNode = 1 })
	p := fresh()
	var mu sync.Mutex
	var woken []string
	p.OnWake(func(o providers.Owner) { mu.Lock(); woken = append(woken, o.UID); mu.Unlock() })
	ctx := context.Background()

	first := cloneSpec("6f1c2d3e-0000-4000-8000-000000000011", 100141)
	first.Requested = time.Now()
	if err := p.Admit(ctx, first); err != nil {
		t.Fatalf("Admit with the slot free = %v; want nil", err)
	}
	if cloneTasks(sim) != 0 {
		t.Fatalf("Admit cloned (%d tasks)", cloneTasks(sim))
	}
	second := cloneSpec("6f1c2d3e-0000-4000-8000-000000000012", 100142)
	second.Requested = first.Requested.Add(time.Second)
	if err := p.Admit(ctx, second); !errors.Is(err, providers.ErrQueued) {
		t.Fatalf("Admit with the slot reserved for another = %v; want ErrQueued", err)
	}
	if err := p.Admit(ctx, first); err != nil {
		t.Fatalf("Admit again for the request holding the reservation = %v; want nil", err)
	}
	if _, err := p.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	if cloneTasks(sim) != 1 || len(vmsOf(sim, second.Owner.UID)) != 0 || p.admission.queued() != 1 {
		t.Fatalf("after a queued Admit: %d clone tasks, VMs %v, %d queued; want 1, none, 1",
			cloneTasks(sim), vmsOf(sim, second.Owner.UID), p.admission.queued())
	}
	until(t, "the queued request woken once the first clone ends", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(woken, second.Owner.UID)
	})
	m, err := p.Create(ctx, second)
	if err != nil || m.Progress != "cloning" {
		t.Fatalf("Create of the woken request = %+v, %v; want its clone started", m, err)
	}
}

// A slot reserved by an offer whose owner never comes (its claim deleted,
// its status write failed) goes to the next in line once the reservation
// lapses: an Admit never holds a slot for good.
func TestOfferedSlotLapsesToTheNextInLine(t *testing.T) {
	a := newAdmission(1, 4)
	a.reservationTTL = 50 * time.Millisecond
	woken := make(chan string, 4)
	a.wake = func(o providers.Owner) { woken <- o.Name }
	first := waiter{vmid: 100301, owner: providers.Owner{Name: "first"}, since: time.Now(), nodes: []string{"pve1"}, storage: "s"}
	second := waiter{vmid: 100302, owner: providers.Owner{Name: "second"}, since: first.since.Add(time.Second), nodes: []string{"pve1"}, storage: "s"}
	if !a.offer(first) {
		t.Fatal("the first offer, with the slot free, was refused")
	}
	if a.offer(second) || a.queued() != 1 {
		t.Fatalf("the second offer passed, or was not queued (%d queued), while the slot is reserved for the first", a.queued())
	}
	select {
	case name := <-woken:
		if name != "second" {
			t.Fatalf("woken %q, want second", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lapsed reservation was never handed to the request waiting for it")
	}
	if node, ok := a.admit(second, true); !ok || node != "pve1" {
		t.Fatalf("admit of the woken request = %q, %v", node, ok)
	}
}

// While clones wait for a slot, a node's task list is read twice as often:
// a clone's end is then what the next machine waits for. Without a queue
// it is read every TaskPollInterval.
func TestTaskPollIsFasterWhileClonesQueue(t *testing.T) {
	a := newAdmission(1, 4)
	p := &Provider{cfg: Config{TaskPollInterval: 200 * time.Millisecond}, admission: a}
	if d := p.pollDelay(); d != 200*time.Millisecond {
		t.Fatalf("no queue: next listing in %s, want 200ms", d)
	}
	if !a.tryAcquire(100, "pve1", "local-lvm") {
		t.Fatal("the free slot was not taken")
	}
	if _, ok := a.admit(waiter{vmid: 101, nodes: []string{"pve1"}, storage: "local-lvm", since: time.Now()}, true); ok {
		t.Fatal("a second clone was admitted to the node's one slot")
	}
	if d := p.pollDelay(); d != 100*time.Millisecond {
		t.Fatalf("a clone queued: next listing in %s, want 100ms", d)
	}
	a.withdraw(101)
	if d := p.pollDelay(); d != 200*time.Millisecond {
		t.Fatalf("the queue gone: next listing in %s, want 200ms", d)
	}
}
