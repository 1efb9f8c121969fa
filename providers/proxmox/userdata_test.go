package proxmox

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/providers"
)

// A template that boots from its cloud-init drive (ide2 in the boot order,
// as the sandbox's and many real templates are) still takes custom user
// data: the drive is detached and the boot order rewritten in one update,
// since Proxmox refuses a boot order naming a missing device. Found by the
// chaos run (internal/chaos): every such claim stayed Provisioning.
func TestUserDataReplacesACloudInitDriveInTheBootOrder(t *testing.T) {
	sim := proxmoxsim.New(proxmoxsim.Options{ErrorLog: log.New(io.Discard, "", 0)})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddTemplate("pve1", 9000, "ubuntu-2404", map[string]string{
		"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio=BC:24:11:00:90:00,bridge=vmbr0",
		"ide2": "local-lvm:vm-9000-cloudinit,media=cdrom", "boot": "order=scsi0;ide2;net0",
	})
	id, secret := sim.APIToken()
	p, err := New(Config{Endpoint: sim.URL(), TokenID: id, TokenSecret: secret, CAPEM: sim.CACertPEM(), RequestTimeout: 5 * time.Second, Installation: "test"})
	if err != nil {
		t.Fatal(err)
	}
	spec := cloneSpec("5eed0000-0000-4000-8000-000000000001", 4242)
	spec.CloudInit = providers.CloudInitSpec{UserData: "#cloud-config\n"}
	ctx := context.Background()
	var last error
	until(t, "the machine to be provisioned", func() bool {
		m, err := p.Create(ctx, spec)
		last = err
		return err == nil && m.Provisioned
	})
	if last != nil {
		t.Fatal(last)
	}
	vm, ok := sim.VM(4242)
	if !ok {
		t.Fatal("VM 4242 is gone")
	}
	if want := fmt.Sprintf("local:iso/hf-cloudinit-test-%d.iso,media=cdrom", 4242); vm.Config["ide2"] != want {
		t.Errorf("ide2 = %q, want %q", vm.Config["ide2"], want)
	}
	if boot := vm.Config["boot"]; strings.Count(boot, "ide2") != 1 {
		t.Errorf("boot = %q, want ide2 exactly once", boot)
	}
}
