package proxmox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/proxmox"
)

// providerFor is a provider of installation inst on sim.
func providerFor(t *testing.T, sim *proxmoxsim.Server, inst string) *proxmox.Provider {
	t.Helper()
	id, secret := sim.APIToken()
	p, err := proxmox.New(proxmox.Config{Endpoint: sim.URL(), TokenID: id, TokenSecret: secret, CAPEM: sim.CACertPEM(),
		RequestTimeout: 5 * time.Second, Installation: inst})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func vmids(ms []providers.Machine) []int {
	var out []int
	for _, m := range ms {
		out = append(out, m.Ref.VMID)
	}
	slices.Sort(out)
	return out
}

// Two installations on one Proxmox: each lists and touches only its own VMs
// and the unmarked ones made before installations; marking one makes it the
// marker's alone.
func TestInstallationsShareOneProxmox(t *testing.T) {
	ctx := context.Background()
	sim, a := newSim(t) // installation inst-a
	b := providerFor(t, sim, "inst-b")
	const uid = "0badc0de-0000-4000-8000-000000000000"
	owner := providers.Owner{UID: uid}
	sim.AddVM("pve1", 4242, "hf-of-b", []string{"hyperfleet", "hf-owner-" + uid, "hf-inst-inst-b"}, true)
	sim.AddVM("pve1", 4343, "hf-before-installations", []string{"hyperfleet", "hf-owner-" + uid}, true)

	aList, err := a.List(ctx)
	if err != nil || !slices.Equal(vmids(aList), []int{4343}) {
		t.Fatalf("inst-a lists %v (%v), want only the unmarked 4343", vmids(aList), err)
	}
	if aList[0].Installation != "" {
		t.Errorf("unmarked VM listed with installation %q", aList[0].Installation)
	}
	bList, err := b.List(ctx)
	if err != nil || !slices.Equal(vmids(bList), []int{4242, 4343}) {
		t.Fatalf("inst-b lists %v (%v), want 4242 and 4343", vmids(bList), err)
	}
	ref := providers.MachineRef{VMID: 4242, Node: "pve1"}
	if err := a.Delete(ctx, ref, owner); !errors.Is(err, providers.ErrNotOwned) {
		t.Errorf("inst-a deleting inst-b's VM: %v, want ErrNotOwned", err)
	}
	if err := a.PowerOff(ctx, ref, owner); !errors.Is(err, providers.ErrNotOwned) {
		t.Errorf("inst-a powering off inst-b's VM: %v, want ErrNotOwned", err)
	}
	if vm, ok := sim.VM(4242); !ok || vm.Status != "running" {
		t.Fatalf("inst-b's VM was touched: %+v", vm)
	}

	legacy := providers.MachineRef{VMID: 4343, Node: "pve1"}
	if err := a.MarkInstallation(ctx, legacy, owner); err != nil {
		t.Fatalf("marking the unmarked VM: %v", err)
	}
	if vm, _ := sim.VM(4343); !slices.Contains(vm.Tags, "hf-inst-inst-a") {
		t.Fatalf("marked VM has tags %v", vm.Tags)
	}
	if bList, _ = b.List(ctx); !slices.Equal(vmids(bList), []int{4242}) {
		t.Errorf("after inst-a marked 4343, inst-b lists %v", vmids(bList))
	}
	if err := b.MarkInstallation(ctx, legacy, owner); !errors.Is(err, providers.ErrNotOwned) {
		t.Errorf("inst-b marking inst-a's VM: %v, want ErrNotOwned", err)
	}
	if aList, _ = a.List(ctx); len(aList) != 1 || aList[0].Installation != "inst-a" {
		t.Errorf("inst-a lists %+v, want 4343 marked inst-a", aList)
	}
}

// A machine with custom user data gets an ISO named after its installation,
// and deleting the machine removes it.
func TestCloudInitISOIsNamedAndRemoved(t *testing.T) {
	ctx := context.Background()
	sim, p := newSim(t)
	sim.AddTemplate("pve1", 9000, "ubuntu", map[string]string{"scsi0": "local-lvm:base-9000-disk-0,size=10G", "boot": "order=scsi0;net0"})
	spec := providers.MachineSpec{
		Ref:       providers.MachineRef{Name: "hf-ci-runner", VMID: 4444},
		Owner:     providers.Owner{UID: "5ca1ab1e-0000-4000-8000-000000000000", Namespace: "ci", Name: "runner"},
		Proxmox:   &providers.ProxmoxSpec{SourceVMID: 9000},
		CloudInit: providers.CloudInitSpec{UserData: "#cloud-config\nruncmd: [echo hi]\n"},
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		m, err := p.Create(ctx, spec)
		if err == nil {
			spec.Ref.Node = m.Node
		}
		return err == nil && m.Provisioned, "creating: " + m.Progress
	})
	want := "hf-cloudinit-inst-a-4444.iso"
	if isos := sim.Volumes("pve1", "local", "iso"); !slices.Equal(isos, []string{want}) {
		t.Fatalf("ISOs on local: %v, want [%s]", isos, want)
	}
	if vm, _ := sim.VM(4444); vm.Config["ide2"] != "local:iso/"+want+",media=cdrom" {
		t.Errorf("ide2 = %q", vm.Config["ide2"])
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := p.Delete(ctx, spec.Ref, spec.Owner)
		return err == nil, "deleting"
	})
	eventually.That(t, 10*time.Second, func() (bool, string) {
		isos := sim.Volumes("pve1", "local", "iso")
		return len(isos) == 0, "ISOs left: " + strings.Join(isos, ", ")
	})
}

// The sweeper's leftovers: this installation's ISOs whose VMID no VM holds,
// and, reported only, those made before installations; never another
// installation's, nor one whose VMID is held.
func TestLeftoverISOs(t *testing.T) {
	ctx := context.Background()
	sim, a := newSim(t)
	sim.AddVM("pve1", 4242, "hf-held", []string{"hyperfleet", "hf-inst-inst-a"}, true)
	for _, name := range []string{"hf-cloudinit-inst-a-5000.iso", "hf-cloudinit-inst-b-5001.iso", "user-data-5002.iso",
		"hf-cloudinit-inst-a-4242.iso", "ubuntu-24.04.iso"} {
		sim.AddVolume("pve1", "local", "iso", name, 4096)
	}
	got, err := a.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range got {
		ids = append(ids, l.ID+"@"+l.Installation)
	}
	slices.Sort(ids)
	if want := []string{"local:iso/hf-cloudinit-inst-a-5000.iso@inst-a", "local:iso/user-data-5002.iso@"}; !slices.Equal(ids, want) {
		t.Fatalf("leftovers %v, want %v", ids, want)
	}
	for _, l := range got {
		err := a.DeleteLeftover(ctx, l)
		switch l.Installation {
		case "":
			if !errors.Is(err, providers.ErrNotOwned) {
				t.Errorf("deleting an ISO made before installations: %v, want ErrNotOwned", err)
			}
		default:
			if err != nil {
				t.Errorf("deleting %s: %v", l.ID, err)
			}
		}
	}
	foreign := providers.Leftover{ID: "local:iso/hf-cloudinit-inst-b-5001.iso", Kind: proxmox.KindCloudInitISO, Machine: providers.MachineRef{VMID: 5001, Node: "pve1"}}
	if err := a.DeleteLeftover(ctx, foreign); !errors.Is(err, providers.ErrNotOwned) {
		t.Errorf("deleting inst-b's ISO: %v, want ErrNotOwned", err)
	}
	want := []string{"hf-cloudinit-inst-a-4242.iso", "hf-cloudinit-inst-b-5001.iso", "ubuntu-24.04.iso", "user-data-5002.iso"}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		isos := sim.Volumes("pve1", "local", "iso")
		return slices.Equal(isos, want), "ISOs: " + strings.Join(isos, ", ")
	})
}
