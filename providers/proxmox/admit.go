package proxmox

import (
	"context"
	"fmt"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Admit says whether spec's clone can start now (providers.Admitter),
// asked before the claim records the machine's reference: when every node
// and storage the clone may use is at its limit, the request joins the clone
// queue in its place and gets ErrQueued, and nothing is made. A free slot
// is reserved for it, as a freed one is for the head of the queue: Create,
// once the reference is recorded, takes it; if Create never comes, the
// reservation lapses to the next in line.
func (p *Provider) Admit(ctx context.Context, spec providers.MachineSpec) error {
	if spec.Ref.VMID < 100 || spec.Proxmox == nil || spec.Owner.UID == "" {
		return nil // Create refuses it, saying why
	}
	if _, busy := p.pending(spec.Ref.VMID); busy {
		return nil
	}
	_, w, _, err := p.placement(ctx, spec)
	if err != nil {
		return err
	}
	if !p.admission.offer(w) {
		return p.queued()
	}
	return nil
}

// placement resolves spec's template and the nodes its clone may run on,
// best first: the clone-queue request Create and Admit make, and the
// storage a full clone goes to.
func (p *Provider) placement(ctx context.Context, spec providers.MachineSpec) (*proxmox.ClusterResource, waiter, string, error) {
	rs, err := p.placementResources(ctx)
	if err != nil {
		return nil, waiter{}, "", err
	}
	src, err := resolveTemplate(rs, spec.Proxmox)
	if err != nil {
		return nil, waiter{}, "", err
	}
	storage := spec.Proxmox.Storage
	if storage == "" {
		storage = p.cfg.DefaultStorage
	}
	if err := p.syncAdmission(ctx); err != nil {
		return nil, waiter{}, "", err
	}
	nodes, slotStorage, err := p.candidates(rs, src, spec.Proxmox, storage, spec.MemoryMiB)
	if err != nil {
		return nil, waiter{}, "", err
	}
	w := waiter{vmid: spec.Ref.VMID, owner: spec.Owner, since: spec.Requested, nodes: nodes, storage: slotStorage}
	return src, w, storage, nil
}

// queued is the error of a request that waits for a clone slot. Its
// message names no node: it stays the same while the claim waits, so
// waiting writes nothing.
func (p *Provider) queued() error {
	return providers.Queued("CloneQueued", 3*time.Second,
		fmt.Errorf("every node and storage it may use is at its concurrent-clone limit (%d per node, %d per storage); it is next once those ahead of it have started",
			p.cfg.MaxClonesPerNode, p.cfg.MaxClonesPerStorage))
}
