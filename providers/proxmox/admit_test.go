package proxmox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/proxmox/proxmoxsim"
)

// Admit makes nothing. With the node's one clone slot taken, it queues the
// request exactly as Create would: the request is woken when the slot is
// free, and its Create then clones. With a slot free it takes nothing, so
// the request behind it is not kept out.
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
	if n := p.admission.inFlight(); n != 0 || cloneTasks(sim) != 0 {
		t.Fatalf("Admit took a slot (%d) or cloned (%d tasks)", n, cloneTasks(sim))
	}
	if _, err := p.Create(ctx, first); err != nil {
		t.Fatal(err)
	}

	second := cloneSpec("6f1c2d3e-0000-4000-8000-000000000012", 100142)
	second.Requested = first.Requested.Add(time.Second)
	if err := p.Admit(ctx, second); !errors.Is(err, providers.ErrQueued) {
		t.Fatalf("Admit with the slot taken = %v; want ErrQueued", err)
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
