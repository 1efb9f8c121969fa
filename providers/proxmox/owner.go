package proxmox

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

var _ providers.OwnerChanger = (*Provider)(nil)

// ChangeOwner rewrites a VM's owner marks from from's to to's: its owner
// tag and its description lines, in one config write, so the VM never
// carries two owners (which would make it nobody's). A VM to owns already
// is left as it is.
func (p *Provider) ChangeOwner(ctx context.Context, ref providers.MachineRef, from, to providers.Owner) error {
	vm, err := p.owned(ctx, ref, to)
	switch {
	case err == nil && vm != nil:
		return nil // changed already
	case err == nil:
		return fmt.Errorf("VM %d: %w", ref.VMID, providers.ErrNotFound)
	case !errors.Is(err, providers.ErrNotOwned):
		return err
	}
	if vm, err = p.owned(ctx, ref, from); err != nil {
		return err
	}
	if vm == nil {
		return fmt.Errorf("VM %d: %w", ref.VMID, providers.ErrNotFound)
	}
	var tags []string
	if c := vm.VirtualMachineConfig; c != nil {
		tags = splitTags(c.Tags)
	}
	// The owner tag also marks a configured VM: a warm standby machine,
	// never configured, is handed over without one, so its new owner's
	// Create configures it with the new owner's spec.
	old := ownerTag(from.UID)
	configured := slices.Contains(tags, old)
	tags = slices.DeleteFunc(tags, func(t string) bool { return t == old })
	if configured {
		tags = append(tags, ownerTag(to.UID))
	}
	if err := vm.ConfigSync(ctx,
		proxmox.VirtualMachineOption{Name: "tags", Value: joinTags(tags)},
		proxmox.VirtualMachineOption{Name: "description", Value: description(to, p.cfg.Installation)},
	); err != nil {
		return classify(fmt.Sprintf("handing VM %d to its new owner", ref.VMID), err)
	}
	return nil
}
