package proxmox

import (
	"context"
	"errors"
	"fmt"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// PowerOff hard-stops a running VM this owner owns. Stopped or absent is done.
func (p *Provider) PowerOff(ctx context.Context, ref providers.MachineRef, owner providers.Owner) error {
	vm, err := p.owned(ctx, ref, owner)
	if vm == nil || err != nil {
		return err
	}
	if vm.Status != "running" {
		return nil
	}
	if kind, busy := p.pending(ref.VMID); busy && kind == "Stop" {
		return p.taskError(ctx, ref.VMID)
	}
	task, err := vm.Stop(ctx)
	if err != nil {
		return classify(fmt.Sprintf("stopping VM %d", ref.VMID), err)
	}
	p.watch(ref.VMID, "Stop", task, owner)
	return nil
}

// Delete stops and destroys a VM this owner owns, with its disks and its
// cloud-init ISO (cloudinit.go). It returns ErrInProgress until the VM is gone.
func (p *Provider) Delete(ctx context.Context, ref providers.MachineRef, owner providers.Owner) error {
	// A machine queued for a clone slot no longer wants one.
	p.admission.withdraw(ref.VMID)
	if err := p.taskError(ctx, ref.VMID); err != nil && !errors.Is(err, providers.ErrNotFound) {
		return err
	}
	vm, err := p.owned(ctx, ref, owner)
	if err != nil {
		return err
	}
	if vm == nil {
		p.taskWarnings(ref.VMID) // nobody is left to tell
		p.removeUserDataISOs(ctx, ref)
		return nil
	}
	if _, busy := p.pending(ref.VMID); busy || vm.Lock != "" {
		// A clone (or our stop or destroy) is still running: Proxmox refuses
		// to destroy a locked VM, so wait for it.
		return fmt.Errorf("VM %d: %w", ref.VMID, providers.ErrInProgress)
	}
	if vm.Status == "running" {
		task, err := vm.Stop(ctx)
		if err != nil {
			return classify(fmt.Sprintf("stopping VM %d before deleting it", ref.VMID), err)
		}
		p.watch(ref.VMID, "Stop", task, owner)
		return fmt.Errorf("VM %d stopping: %w", ref.VMID, providers.ErrInProgress)
	}
	// The ISO goes with the destroy call: a caller that stops calling once
	// the VM is gone (the sweeper) must not leave it behind. One made before
	// installations is removed by go-proxmox's Delete itself.
	_ = p.deleteISO(ctx, vm.Node, isoName(p.cfg.Installation, ref.VMID))
	task, err := vm.Delete(ctx, &proxmox.VirtualMachineDeleteOptions{Purge: true, DestroyUnreferencedDisks: true})
	if err != nil {
		return classify(fmt.Sprintf("deleting VM %d", ref.VMID), err)
	}
	p.watch(ref.VMID, "Delete", task, owner)
	return fmt.Errorf("VM %d deleting: %w", ref.VMID, providers.ErrInProgress)
}

// owned loads the VM and checks its owner: (nil, nil) when absent,
// ErrNotOwned when someone else's.
func (p *Provider) owned(ctx context.Context, ref providers.MachineRef, owner providers.Owner) (*proxmox.VirtualMachine, error) {
	vm, err := p.find(ctx, ref)
	if errors.Is(err, providers.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var tags []string
	desc := ""
	if c := vm.VirtualMachineConfig; c != nil {
		tags, desc = splitTags(c.Tags), c.Description
	}
	if vm.Lock == "clone" && unmarked(tags, desc) {
		// A clone still running shows no owner yet; wait for it to finish.
		return nil, fmt.Errorf("VM %d is being cloned: %w", ref.VMID, providers.ErrInProgress)
	}
	if marks := readMarks(tags, desc); marks.conflicting() {
		return nil, conflictError(ref.VMID, vm.Node, marks, providers.ErrNotOwned)
	}
	if !ownedBy(tags, desc, owner, p.cfg.Installation) {
		return nil, fmt.Errorf("VM %d on %s (owner %q, installation %q): %w", ref.VMID, vm.Node, ownerUID(tags, desc), installationOf(tags, desc), providers.ErrNotOwned)
	}
	return vm, nil
}
