package proxmox

import (
	"context"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/providers"
)

// Once the guest agent answers, Observe deletes the VM's NoCloud ISO from
// storage and empties its CD-ROM drive; what it does follows from the VM's
// config, so a failed step is done again by the next Observe, and an ISO
// deleted by other hands does not stop the eject.
func TestBootedVMsUserDataISOIsEjectedAndDeleted(t *testing.T) {
	sim := proxmoxsim.New(proxmoxsim.Options{ErrorLog: log.New(io.Discard, "", 0)})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddTemplate("pve1", 9000, "ubuntu-2404", map[string]string{
		"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio=BC:24:11:00:90:00,bridge=vmbr0", "boot": "order=scsi0;net0",
	})
	id, secret := sim.APIToken()
	p, err := New(Config{Endpoint: sim.URL(), TokenID: id, TokenSecret: secret, CAPEM: sim.CACertPEM(), RequestTimeout: 5 * time.Second, Installation: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := logr.NewContext(context.Background(), funcr.New(func(prefix, args string) { t.Log(prefix, args) }, funcr.Options{Verbosity: 1}))
	provision := func(uid string, vmid int) providers.MachineRef {
		spec := cloneSpec(uid, vmid)
		spec.CloudInit = providers.CloudInitSpec{UserData: "#cloud-config\nwrite_files: []\n"}
		var m providers.Machine
		until(t, fmt.Sprintf("VM %d to be provisioned", vmid), func() bool {
			var err error
			m, err = p.Create(ctx, spec)
			return err == nil && m.Provisioned
		})
		return m.Ref
	}
	iso := func(vmid int) string { return fmt.Sprintf("hf-cloudinit-test-%d.iso", vmid) }
	onStorage := func(vmid int) bool { return slices.Contains(sim.Volumes("pve1", "local", "iso"), iso(vmid)) }
	ide2 := func(vmid int) string { vm, _ := sim.VM(vmid); return vm.Config["ide2"] }

	ref := provision("e1ec0000-0000-4000-8000-000000000001", 4301)
	if !onStorage(4301) || ide2(4301) != "local:iso/"+iso(4301)+",media=cdrom" {
		t.Fatalf("before boot: ISO on storage %v, ide2 %q", onStorage(4301), ide2(4301))
	}
	// The eject's config change fails once: the ISO is deleted, the drive
	// still names it, and the next Observe finishes the job.
	if err := sim.InjectFault(proxmoxsim.Fault{Method: "POST", Path: `^/nodes/[^/]+/qemu/4301/config$`, Times: 1, Action: proxmoxsim.FaultHTTPError, Status: 500}); err != nil {
		t.Fatal(err)
	}
	until(t, "the guest agent to answer", func() bool {
		m, err := p.Observe(ctx, ref)
		return err == nil && len(m.Addresses) > 0
	})
	if onStorage(4301) {
		t.Error("the ISO is still on storage after the guest booted")
	}
	// What the guest read at boot (cloud-init's own copy) is the user data.
	if seed, ok := sim.SeedAtBoot(4301); !ok || !strings.Contains(string(seed), "write_files: []") {
		t.Errorf("the guest read no user data from its CD-ROM at boot (%d bytes)", len(seed))
	}
	until(t, "the drive to be emptied", func() bool {
		_, _ = p.Observe(ctx, ref)
		return ide2(4301) == ejectedCDROM
	})
	if vm, _ := sim.VM(4301); vm.Status != "running" {
		t.Errorf("the VM is %s after the eject, want running", vm.Status)
	}

	// An ISO someone already deleted: the drive is emptied all the same.
	ref2 := provision("e1ec0000-0000-4000-8000-000000000002", 4302)
	if err := p.deleteISOAndWait(ctx, "pve1", iso(4302)); err != nil {
		t.Fatal(err)
	}
	until(t, "the drive of VM 4302 to be emptied", func() bool {
		_, _ = p.Observe(ctx, ref2)
		return ide2(4302) == ejectedCDROM
	})
	// Observing an ejected VM again changes nothing.
	tasks := len(sim.Tasks())
	if _, err := p.Observe(ctx, ref2); err != nil {
		t.Fatal(err)
	}
	if n := len(sim.Tasks()); n != tasks {
		t.Errorf("observing an ejected VM started %d tasks", n-tasks)
	}
}

// An ISO deletion that ends "WARNINGS: 1" deleted the ISO: a success, not a
// failure to retry.
func TestISODeletionWithWarningsSucceeds(t *testing.T) {
	sim := proxmoxsim.New(proxmoxsim.Options{ErrorLog: log.New(io.Discard, "", 0)})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddVolume("pve1", "local", "iso", "hf-cloudinit-test-4310.iso", 1<<20)
	id, secret := sim.APIToken()
	p, err := New(Config{Endpoint: sim.URL(), TokenID: id, TokenSecret: secret, CAPEM: sim.CACertPEM(), RequestTimeout: 5 * time.Second, Installation: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.InjectFault(proxmoxsim.Fault{Operation: proxmoxsim.OpVolumeDelete, Action: proxmoxsim.FaultTaskWarnings, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if err := p.deleteISOAndWait(context.Background(), "pve1", "hf-cloudinit-test-4310.iso"); err != nil {
		t.Fatalf("deleting an ISO whose task ended WARNINGS: 1 = %v", err)
	}
	if slices.Contains(sim.Volumes("pve1", "local", "iso"), "hf-cloudinit-test-4310.iso") {
		t.Fatal("the ISO is still there")
	}
}
