package proxmox

import (
	"context"
	"fmt"
	"slices"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

var _ providers.InstallationMarker = (*Provider)(nil)

// MarkInstallation tags a VM made before installations with this
// installation, once the caller knows its owner is one of this
// installation's claims (the sweeper does). A VM already marked is left
// alone; one marked for another installation is refused by owned.
func (p *Provider) MarkInstallation(ctx context.Context, ref providers.MachineRef, owner providers.Owner) error {
	vm, err := p.owned(ctx, ref, owner)
	if vm == nil || err != nil {
		return err
	}
	var tags []string
	if c := vm.VirtualMachineConfig; c != nil {
		tags = splitTags(c.Tags)
	}
	if slices.Contains(tags, installationTag(p.cfg.Installation)) || !slices.Contains(tags, managedTag) {
		// Marked already, or not configured yet: configuring writes the mark.
		return nil
	}
	return p.markInstallation(ctx, vm, tags)
}

// markInstallation adds this installation's tag to a VM's tags.
func (p *Provider) markInstallation(ctx context.Context, vm *proxmox.VirtualMachine, tags []string) error {
	value := joinTags(append(slices.Clone(tags), installationTag(p.cfg.Installation)))
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "tags", Value: value}); err != nil {
		return classify(fmt.Sprintf("marking VM %d with installation %s", vm.VMID, p.cfg.Installation), err)
	}
	return nil
}
