package proxmox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"github.com/luthermonson/go-proxmox"
)

// ejectedCDROM is what ide2 holds once the user data is ejected: the drive
// stays, empty, so the boot order that names it stays valid, and changing
// a CD-ROM's medium applies to a running VM at once (removing the drive
// would wait, pending, for a reboot).
const ejectedCDROM = "none,media=cdrom"

// ejectUserData deletes a booted VM's NoCloud ISO from storage and empties
// its CD-ROM drive. The ISO holds the VM's user data — a runner's
// credential among them — and must not stay readable, on the storage or as
// /dev/sr0 in the guest, for the VM's whole life.
//
// It runs once the guest agent answers: qemu-guest-agent is an ordinary
// systemd service, ordered after sysinit.target, and cloud-init-local —
// which reads the NoCloud seed and keeps its own copy under /var/lib/cloud
// — is ordered before it, so by then the guest needs the ISO no more.
// (A template without the guest agent keeps its ISO until the VM is
// deleted, as before.)
//
// What it does follows from the VM's config alone, so it is idempotent and
// a restart picks it up: while ide2 still names this VM's ISO, the ISO is
// deleted (gone already is fine) and then the drive emptied; a crash in
// between repeats both. The ISO goes first, so an emptied drive always
// means a deleted ISO. The sweeper remains the backstop for a VM deleted
// before it booted.
func (p *Provider) ejectUserData(ctx context.Context, vm *proxmox.VirtualMachine) {
	c := vm.VirtualMachineConfig
	if c == nil {
		return
	}
	vmid := int(vm.VMID) //nolint:gosec // VMIDs fit int
	name := isoName(p.cfg.Installation, vmid)
	if !strings.Contains(c.IDEs["ide2"], "iso/"+name) {
		return
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("vmid", vmid, "iso", name)
	if err := p.deleteISOAndWait(ctx, vm.Node, name); err != nil {
		log.Info("Deleting the cloud-init ISO of a booted VM failed; retried at the next observation", "error", err.Error())
		return
	}
	task, err := vm.Config(ctx, proxmox.VirtualMachineOption{Name: "ide2", Value: ejectedCDROM})
	if err == nil {
		err = task.WaitFor(ctx, 2)
	}
	if err != nil {
		log.Info("Ejecting the cloud-init ISO of a booted VM failed; retried at the next observation", "error", err.Error())
		return
	}
	log.V(1).Info("Ejected and deleted the cloud-init ISO of a booted VM")
}

// deleteISOAndWait deletes one ISO of the cloud-init storage and waits for
// the task; an ISO already gone counts as deleted.
func (p *Provider) deleteISOAndWait(ctx context.Context, node, name string) error {
	volid := p.cfg.CloudInitStorage + ":iso/" + name
	var upid proxmox.UPID
	err := p.client.Delete(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, p.cfg.CloudInitStorage, volid), &upid)
	if err != nil {
		if isNoSuchFile(err.Error()) {
			return nil
		}
		return classify("deleting "+volid+" on "+node, err)
	}
	task := proxmox.NewTask(upid, p.client)
	if err := task.WaitFor(ctx, 5); err != nil {
		return classify("deleting "+volid+" on "+node, err)
	}
	// go-proxmox counts anything but "OK" as failed; "WARNINGS: <n>" is a
	// success to Proxmox.
	if task.IsFailed && !succeeded(task.ExitStatus) && !isNoSuchFile(task.ExitStatus) {
		return errors.New("deleting " + volid + " on " + node + ": " + task.ExitStatus)
	}
	return nil
}

// isNoSuchFile: Proxmox's words (a failed task, or an error answer) for a
// volume that does not exist.
func isNoSuchFile(msg string) bool {
	return strings.Contains(msg, "No such file") || strings.Contains(msg, "does not exist")
}
