package proxmox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/providers"
)

// Proxmox VE 9 lists networks in /cluster/resources as rows of type
// "network"; the provider places, finds and lists VMs as before, and never
// takes such a row for a node, a storage or a VM.
func TestNetworkRowsOfProxmox9AreIgnored(t *testing.T) {
	sim := proxmoxsim.New(proxmoxsim.Options{Version: "9.0.3"})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	sim.AddTemplate("pve1", 9000, "ubuntu-2404", nil)
	id, secret := sim.APIToken()
	p, err := New(Config{Endpoint: sim.URL(), TokenID: id, TokenSecret: secret, CAPEM: sim.CACertPEM(), Installation: "inst-a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rs, err := p.resources(ctx)
	if err != nil || !slices.ContainsFunc(rs, func(r *proxmox.ClusterResource) bool { return r.Type == "network" }) {
		t.Fatalf("the simulated Proxmox 9 lists no network rows (%v)", err)
	}
	spec := cloneSpec("0f3a9c2e-1111-2222-3333-444455556690", 100500)
	until(t, "the clone to run", func() bool {
		m, err := p.Create(ctx, spec)
		if err != nil && !errors.Is(err, providers.ErrQueued) {
			t.Fatalf("Create = %v", err)
		}
		return m.Provisioned && m.State == providers.PowerRunning
	})
	ms, err := p.List(ctx)
	if err != nil || len(ms) != 1 || ms[0].Ref.VMID != spec.Ref.VMID {
		t.Fatalf("List = %+v, %v; want the one clone", ms, err)
	}
	if _, err := p.Observe(ctx, providers.MachineRef{VMID: spec.Ref.VMID}); err != nil {
		t.Fatalf("Observe without a node (found through the listing) = %v", err)
	}
}

// A clone task that ends "WARNINGS: 1" is a success: the machine is
// configured and started, and the warning is handed to the caller once.
func TestCloneWithWarningsGoesOnAndSaysSo(t *testing.T) {
	sim, fresh := cloneSim(t, proxmoxsim.DefaultLatencies(), nil)
	if err := sim.InjectFault(proxmoxsim.Fault{Operation: proxmoxsim.OpClone, Action: proxmoxsim.FaultTaskWarnings, Times: 1}); err != nil {
		t.Fatal(err)
	}
	p := fresh()
	spec := cloneSpec("0f3a9c2e-1111-2222-3333-444455556691", 100510)
	ctx := context.Background()
	var warnings []string
	until(t, "the clone to run", func() bool {
		m, err := p.Create(ctx, spec)
		if err != nil && !errors.Is(err, providers.ErrQueued) {
			t.Fatalf("Create = %v", err)
		}
		warnings = append(warnings, m.Warnings...)
		return m.Provisioned && m.State == providers.PowerRunning
	})
	if len(warnings) != 1 || !strings.Contains(warnings[0], "Clone task") || !strings.Contains(warnings[0], "warnings: 1") {
		t.Fatalf("warnings = %q; want the clone's, once", warnings)
	}
	var exits []string
	for _, task := range sim.Tasks() {
		if task.Type == "qmclone" {
			exits = append(exits, task.ExitStatus)
		}
	}
	if !slices.Equal(exits, []string{"WARNINGS: 1"}) {
		t.Fatalf("clone exit statuses = %q", exits)
	}
}
