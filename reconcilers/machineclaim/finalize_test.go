package machineclaim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// An unreachable hypervisor cannot pin a deleted claim forever: after the
// finalization deadline the claim goes, with a Warning event saying which VM
// may be left; when Proxmox answers again the sweeper deletes that VM.
func TestFinalizationDeadlineReleasesTheClaimAndTheSweeperFinishes(t *testing.T) {
	l := newLab(t)
	l.claim("stuck")
	mc := l.waitPhase("stuck", hypervisorv1alpha1.MachineReady, time.Minute)
	vmid := int(*mc.Status.VMID)

	if err := l.Sim.InjectFault(proxmoxsim.Fault{Path: `.*`, Action: proxmoxsim.FaultHTTPError, Status: 503}); err != nil {
		t.Fatal(err)
	}
	if err := l.C.Delete(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	// The deletion fails and is retried; then the suite's 8 s finalization
	// timeout passes.
	l.waitPhase("stuck", hypervisorv1alpha1.MachineStopping, 30*time.Second)
	claimClock.Step(t, 9*time.Second)
	eventually.That(t, 40*time.Second, func() (bool, string) {
		err := l.Get(mc)
		return apierrors.IsNotFound(err), fmt.Sprintf("claim still present (%v): %s", err, hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions))
	})
	eventually.That(t, 10*time.Second, func() (bool, string) {
		var evs eventsv1.EventList
		if err := l.C.List(context.Background(), &evs, inNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "FinalizerDeadlineExceeded" && e.Type == "Warning" && e.Regarding.Name == "stuck" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no FinalizerDeadlineExceeded event among %d events", len(evs.Items))
	})
	if _, ok := l.Sim.VM(vmid); !ok {
		t.Fatal("the VM vanished while Proxmox was failing every request")
	}

	l.Sim.ClearFaults()
	eventually.That(t, 30*time.Second, func() (bool, string) {
		_, ok := l.Sim.VM(vmid)
		return !ok, fmt.Sprintf("VM %d still exists after Proxmox recovered", vmid)
	})
}
