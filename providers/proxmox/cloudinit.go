package proxmox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// A machine's NoCloud ISO is named after its installation and VMID,
// "hf-cloudinit-<installation>-<vmid>.iso": an ISO carries no tags, so its
// name is what tells the sweeper whose it is. ISOs made before installations
// have go-proxmox's name, "user-data-<vmid>.iso"; they are still removed with
// their VM, and reported (never deleted) by the sweeper once their VM is
// gone, since any go-proxmox user names its ISOs so.
const isoPrefix = "hf-cloudinit-"

var legacyISO = regexp.MustCompile(`^user-data-(\d+)\.iso$`)

func isoName(installation string, vmid int) string {
	return fmt.Sprintf("%s%s-%d.iso", isoPrefix, installation, vmid)
}

// parseISO reads the installation and VMID from a cloud-init ISO's file
// name; installation is "" for one made before installations. ok is false
// for any other file.
func parseISO(name string) (installation string, vmid int, ok bool) {
	if m := legacyISO.FindStringSubmatch(name); m != nil {
		vmid, err := strconv.Atoi(m[1])
		return "", vmid, err == nil
	}
	rest, found := strings.CutPrefix(name, isoPrefix)
	if !found {
		return "", 0, false
	}
	rest, found = strings.CutSuffix(rest, ".iso")
	i := strings.LastIndexByte(rest, '-')
	if !found || i < 0 {
		return "", 0, false
	}
	vmid, err := strconv.Atoi(rest[i+1:])
	if err != nil || vmid < 100 || providers.ValidateInstallation(rest[:i]) != nil {
		return "", 0, false
	}
	return rest[:i], vmid, true
}

// uploadUserData builds the NoCloud ISO, uploads it to the cloud-init
// storage of the VM's node and attaches it as ide2. It waits for the upload
// and the config change, as go-proxmox's CloudInit does: a few kilobytes.
func (p *Provider) uploadUserData(ctx context.Context, vm *proxmox.VirtualMachine, files map[string]string) error {
	vmid := int(vm.VMID) //nolint:gosec // VMIDs fit int
	name := isoName(p.cfg.Installation, vmid)
	dir, err := os.MkdirTemp("", "hyperfleet-cloudinit-")
	if err != nil {
		return fmt.Errorf("building the cloud-init ISO of VM %d: %w", vmid, err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, name)
	if err := buildISO(path, files); err != nil {
		return fmt.Errorf("building the cloud-init ISO of VM %d: %w", vmid, err)
	}
	node := (&proxmox.Node{}).New(p.client, vm.Node)
	storage, err := node.Storage(ctx, p.cfg.CloudInitStorage)
	if err != nil {
		return classify(fmt.Sprintf("reading storage %s on %s", p.cfg.CloudInitStorage, vm.Node), err)
	}
	if !strings.Contains(storage.Content, "iso") {
		return providers.Permanent("CloudInitStorageInvalid", fmt.Sprintf(
			"storage %s (spec.proxmox.cloudInitStorage) does not accept iso content (it accepts %q): enable iso on it or name another", p.cfg.CloudInitStorage, storage.Content), nil)
	}
	task, err := storage.Upload("iso", path)
	if err != nil {
		return classify(fmt.Sprintf("uploading the cloud-init ISO of VM %d", vmid), err)
	}
	if err := task.WaitFor(ctx, 5); err != nil {
		return classify(fmt.Sprintf("uploading the cloud-init ISO of VM %d", vmid), err)
	}
	boot := ""
	if c := vm.VirtualMachineConfig; c != nil {
		boot = c.Boot
	}
	task, err = vm.Config(ctx,
		proxmox.VirtualMachineOption{Name: "ide2", Value: fmt.Sprintf("%s:iso/%s,media=cdrom", p.cfg.CloudInitStorage, name)},
		proxmox.VirtualMachineOption{Name: "boot", Value: boot + ";ide2"})
	if err != nil {
		return classify(fmt.Sprintf("attaching the cloud-init ISO to VM %d", vmid), err)
	}
	return classify(fmt.Sprintf("attaching the cloud-init ISO to VM %d", vmid), task.WaitFor(ctx, 2))
}

// buildISO writes a NoCloud ISO (volume "cidata") holding files at path.
func buildISO(path string, files map[string]string) (err error) {
	f, err := os.Create(path) //nolint:gosec // a path in our own temporary directory
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	backend, err := file.OpenFromPath(path, false)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := backend.Close(); err == nil {
			err = cerr
		}
	}()
	fs, err := iso9660.Create(backend, 0, 0, 2048, "")
	if err != nil {
		return err
	}
	for name, content := range files {
		if content == "" {
			continue
		}
		rw, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return err
		}
		if _, err := rw.Write([]byte(content)); err != nil {
			return err
		}
		// go-diskfs records a file's size when it is closed, before Finalize.
		if err := rw.Close(); err != nil {
			return err
		}
	}
	return fs.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: "cidata"})
}

// removeUserDataISOs deletes the VM's cloud-init ISO, and one made before
// installations, best effort: a leftover ISO of a few kilobytes must never
// hold up a claim's deletion, and the sweeper removes what is left.
func (p *Provider) removeUserDataISOs(ctx context.Context, ref providers.MachineRef) {
	if ref.Node == "" {
		return
	}
	for _, name := range []string{isoName(p.cfg.Installation, ref.VMID), fmt.Sprintf(proxmox.UserDataISOFormat, ref.VMID)} {
		_ = p.deleteISO(ctx, ref.Node, name)
	}
}

// deleteISO asks Proxmox to delete one ISO of the cloud-init storage; it
// does not wait for the task.
func (p *Provider) deleteISO(ctx context.Context, node, name string) error {
	volid := p.cfg.CloudInitStorage + ":iso/" + name
	err := p.client.Delete(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", node, p.cfg.CloudInitStorage, volid), nil)
	if err != nil {
		return classify("deleting "+volid+" on "+node, err)
	}
	return nil
}
