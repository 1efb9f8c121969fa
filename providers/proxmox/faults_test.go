package proxmox_test

import (
	"context"
	"errors"
	"io"
	"log"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/proxmox"
)

func newSim(t *testing.T) (*proxmoxsim.Server, *proxmox.Provider) {
	t.Helper()
	sim := proxmoxsim.New(proxmoxsim.Options{ErrorLog: log.New(io.Discard, "", 0)})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	id, secret := sim.APIToken()
	p, err := proxmox.New(proxmox.Config{Endpoint: sim.URL(), TokenID: id, TokenSecret: secret, CAPEM: sim.CACertPEM(),
		RequestTimeout: 500 * time.Millisecond, Installation: "inst-a"})
	if err != nil {
		t.Fatal(err)
	}
	return sim, p
}

// Every kind of fault the simulator injects maps to the error class the
// reconcilers report, and the provider works again once the fault clears.
func TestFaultsClassifyAndRecover(t *testing.T) {
	cases := []struct {
		name      string
		fault     proxmoxsim.Fault
		transient string
		permanent string
	}{
		{"5xx", proxmoxsim.Fault{Path: `^/version$`, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "internal error"}, "HypervisorError", ""},
		{"hang until timeout", proxmoxsim.Fault{Path: `^/version$`, Action: proxmoxsim.FaultHang}, "HypervisorUnreachable", ""},
		{"slow answer past the timeout", proxmoxsim.Fault{Path: `^/version$`, Action: proxmoxsim.FaultDelay, Delay: 2 * time.Second}, "HypervisorUnreachable", ""},
		{"dropped connection", proxmoxsim.Fault{Path: `^/version$`, Action: proxmoxsim.FaultDrop}, "HypervisorUnreachable", ""},
		{"lock error", proxmoxsim.Fault{Path: `^/version$`, Action: proxmoxsim.FaultLockError}, "HypervisorBusy", ""},
		{"token revoked", proxmoxsim.Fault{Path: `^/version$`, Action: proxmoxsim.FaultHTTPError, Status: 401}, "", "AuthenticationFailed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim, p := newSim(t)
			if err := sim.InjectFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			_, err := p.Check(context.Background())
			var tr *providers.TransientError
			switch {
			case tc.transient != "" && (!errors.As(err, &tr) || tr.Reason != tc.transient):
				t.Fatalf("Check = %v; want transient %s", err, tc.transient)
			case tc.permanent != "":
				if pe, ok := providers.IsPermanent(err); !ok || pe.Reason != tc.permanent {
					t.Fatalf("Check = %v; want permanent %s", err, tc.permanent)
				}
			}
			sim.ClearFaults()
			if info, err := p.Check(context.Background()); err != nil || info.Version == "" {
				t.Fatalf("after the fault cleared: %+v, %v", info, err)
			}
		})
	}
}

// A delete or power-off never touches a VM HyperFleet does not own.
func TestForeignVMsAreNeverTouched(t *testing.T) {
	sim, p := newSim(t)
	sim.AddVM("pve1", 4343, "prod-db", []string{"prod"}, true)
	ref := providers.MachineRef{VMID: 4343, Node: "pve1"}
	me := providers.Owner{UID: "0badc0de-0000-4000-8000-000000000000"}
	if err := p.Delete(context.Background(), ref, me); !errors.Is(err, providers.ErrNotOwned) {
		t.Errorf("Delete of a foreign VM = %v, want ErrNotOwned", err)
	}
	if err := p.PowerOff(context.Background(), ref, me); !errors.Is(err, providers.ErrNotOwned) {
		t.Errorf("PowerOff of a foreign VM = %v, want ErrNotOwned", err)
	}
	if vm, ok := sim.VM(4343); !ok || vm.Status != "running" {
		t.Fatalf("the foreign VM was touched: %+v", vm)
	}
	machines, err := p.List(context.Background())
	if err != nil || len(machines) != 0 {
		t.Errorf("List = %v, %v; want no machines (none is ours)", machines, err)
	}
}
