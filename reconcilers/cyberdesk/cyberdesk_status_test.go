package cyberdesk

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions/conditionstest"
)

// Every state a desk can be in becomes the right phase and kstatus
// summary, and the conditions Set from it keep the kstatus invariants.
func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	start, expiry := metav1.NewTime(now.Add(-time.Minute)), metav1.NewTime(now.Add(59*time.Minute))
	running := &providers.Machine{UID: "vm-uid", Node: "node-1", Addresses: []string{"10.0.0.5"}, State: providers.PowerRunning}
	booting := &providers.Machine{UID: "vm-uid", State: providers.PowerProvisioning, Progress: "instance Scheduling"}
	withReady := func(phase cyberdeskv1alpha1.CyberdeskPhase, reason, msg string) func(*cyberdeskv1alpha1.Cyberdesk) {
		return func(d *cyberdeskv1alpha1.Cyberdesk) {
			d.Status.Phase = phase
			conditions.Set(d, 1, conditions.Summary{State: conditions.Finished, Reason: reason, Message: msg})
		}
	}
	for _, tc := range []struct {
		name   string
		desk   func(*cyberdeskv1alpha1.Cyberdesk)
		scope  scope
		err    error
		phase  cyberdeskv1alpha1.CyberdeskPhase
		state  conditions.State
		reason string
		want   string
		// empty: nothing concluded, the conditions are left alone.
		empty bool
		ip    string
	}{
		{name: "provisioning", scope: scope{machine: booting},
			phase: cyberdeskv1alpha1.CyberdeskProvisioning, state: conditions.Progressing, reason: "Provisioning", want: "VM cyberdesk-alice: instance Scheduling"},
		{name: "running", scope: scope{machine: running, started: &start, expiry: &expiry},
			phase: cyberdeskv1alpha1.CyberdeskRunning, state: conditions.Ready, reason: "Running", want: "VM cyberdesk-alice runs on node-1 at 10.0.0.5", ip: "10.0.0.5"},
		{name: "timed out, removing the VM", scope: scope{machine: running, started: &start, expiry: &expiry, retire: ReasonTimedOut},
			phase: cyberdeskv1alpha1.CyberdeskStopping, state: conditions.Progressing, reason: ReasonTimedOut, want: "shutting down and deleting VM cyberdesk-alice (TimedOut)", ip: "10.0.0.5"},
		{name: "removal failing", scope: scope{retire: ReasonGuestShutdown, deleteErr: errors.New("connection refused")},
			phase: cyberdeskv1alpha1.CyberdeskStopping, state: conditions.Progressing, reason: ReasonGuestShutdown, want: "deleting VM cyberdesk-alice failed, retrying: connection refused"},
		{name: "ended by its timeout", scope: scope{machine: running, retire: ReasonTimedOut, ended: &ending{reason: ReasonTimedOut, what: "VM cyberdesk-alice deleted"}},
			phase: cyberdeskv1alpha1.CyberdeskTerminated, state: conditions.Finished, reason: ReasonTimedOut, want: "VM cyberdesk-alice deleted; the desktop has ended"},
		{name: "ended by a guest shutdown", scope: scope{ended: &ending{reason: ReasonGuestShutdown, what: "VM cyberdesk-alice deleted"}},
			phase: cyberdeskv1alpha1.CyberdeskTerminated, state: conditions.Finished, reason: ReasonGuestShutdown, want: "the desktop has ended"},
		{name: "VM failed", scope: scope{ended: &ending{reason: ReasonVMFailed, what: "VM cyberdesk-alice deleted"}},
			phase: cyberdeskv1alpha1.CyberdeskFailed, state: conditions.Stalled, reason: ReasonVMFailed, want: "delete the Cyberdesk and create a new one"},
		{name: "VM deleted outside", scope: scope{ended: &ending{reason: ReasonVMDeleted, what: "VirtualMachine cyberdesk-alice was deleted outside HyperFleet"}},
			phase: cyberdeskv1alpha1.CyberdeskTerminated, state: conditions.Finished, reason: ReasonVMDeleted, want: "deleted outside HyperFleet"},
		{name: "already terminated", desk: withReady(cyberdeskv1alpha1.CyberdeskTerminated, ReasonTimedOut, "VM cyberdesk-alice deleted; the desktop has ended"),
			phase: cyberdeskv1alpha1.CyberdeskTerminated, state: conditions.Finished, reason: ReasonTimedOut, want: "the desktop has ended"},
		{name: "already failed", desk: withReady(cyberdeskv1alpha1.CyberdeskFailed, ReasonVMFailed, "VM cyberdesk-alice deleted; the desktop's VM failed"),
			phase: cyberdeskv1alpha1.CyberdeskFailed, state: conditions.Stalled, reason: ReasonVMFailed, want: "the desktop's VM failed"},
		{name: "template invalid", scope: scope{blocked: &blocker{state: conditions.Stalled, reason: "TemplateInvalid", message: "the template uses ${desk_owner}"}},
			phase: cyberdeskv1alpha1.CyberdeskPending, state: conditions.Stalled, reason: "TemplateInvalid", want: "${desk_owner}"},
		{name: "KubeVirt unreachable while running", desk: func(d *cyberdeskv1alpha1.Cyberdesk) { d.Status.Phase = cyberdeskv1alpha1.CyberdeskRunning },
			scope: scope{blocked: &blocker{state: conditions.Waiting, reason: meta.DependencyNotReadyReason, message: "connection refused"}},
			phase: cyberdeskv1alpha1.CyberdeskRunning, state: conditions.Waiting, reason: meta.DependencyNotReadyReason, want: "connection refused"},
		{name: "VM name taken", desk: func(d *cyberdeskv1alpha1.Cyberdesk) { d.Status.Phase = cyberdeskv1alpha1.CyberdeskProvisioning },
			scope: scope{blocked: &blocker{phase: cyberdeskv1alpha1.CyberdeskPending, state: conditions.Stalled, reason: "VMNameTaken", message: "VirtualMachine cyberdesk-alice exists"}},
			phase: cyberdeskv1alpha1.CyberdeskPending, state: conditions.Stalled, reason: "VMNameTaken", want: "exists"},
		{name: "deleting", desk: deleting,
			phase: cyberdeskv1alpha1.CyberdeskStopping, state: conditions.Progressing, reason: meta.DeletingReason, want: "because the Cyberdesk is being deleted"},
		{name: "deleting, VM deletion failing", desk: deleting, scope: scope{deleteErr: errors.New("connection refused")},
			phase: cyberdeskv1alpha1.CyberdeskStopping, state: conditions.Progressing, reason: meta.DeletingReason, want: "failed, retrying: connection refused"},
		{name: "released", desk: deleting, scope: scope{released: true}, phase: cyberdeskv1alpha1.CyberdeskRunning, empty: true},
		{name: "API error before the phases", err: errors.New("the server is currently unable to handle the request"), empty: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &cyberdeskv1alpha1.Cyberdesk{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "desks", Generation: 2},
				Spec: cyberdeskv1alpha1.CyberdeskSpec{TimeoutMs: 3600000}}
			if tc.desk != nil {
				tc.desk(d)
			}
			s := tc.scope
			s.desk, s.now = d, now
			got := computeStatus(&s, tc.err)
			if tc.empty {
				if got.Reason != "" || d.Status.Phase != tc.phase {
					t.Errorf("got %s %v/%s; want nothing concluded", d.Status.Phase, got.State, got.Reason)
				}
				return
			}
			if d.Status.Phase != tc.phase || got.State != tc.state || got.Reason != tc.reason || !strings.Contains(got.Message, tc.want) {
				t.Errorf("got %s %v/%s %q; want %s %v/%s containing %q", d.Status.Phase, got.State, got.Reason, got.Message, tc.phase, tc.state, tc.reason, tc.want)
			}
			if d.Status.IPAddress != tc.ip {
				t.Errorf("status.ipAddress = %q, want %q", d.Status.IPAddress, tc.ip)
			}
			if d.DeletionTimestamp.IsZero() && (d.Status.VirtualMachineRef == nil || d.Status.VirtualMachineRef.Name != "cyberdesk-alice") {
				t.Errorf("virtualMachineRef = %+v", d.Status.VirtualMachineRef)
			}
			if s.machine != nil && d.Status.VirtualMachineRef.UID != "vm-uid" {
				t.Errorf("virtualMachineRef.uid = %q", d.Status.VirtualMachineRef.UID)
			}
			if s.started != nil && (!d.Status.StartTime.Equal(s.started) || !d.Status.ExpiryTime.Equal(s.expiry)) {
				t.Errorf("start %v expiry %v", d.Status.StartTime, d.Status.ExpiryTime)
			}
			// As the finalize-status step would: conditions from the
			// summary, observedGeneration stamped on success.
			conditionstest.CheckSummary(t, d, got, true)
		})
	}
}

func deleting(d *cyberdeskv1alpha1.Cyberdesk) {
	now := metav1.Now()
	d.DeletionTimestamp = &now
	d.Finalizers = []string{Finalizer}
	d.Status.Phase = cyberdeskv1alpha1.CyberdeskRunning
}

// The claim's words become the desk's: a claim still making its VM is a
// desk Pending and progressing, a claim whose VM deletion fails says why on
// the desk.
func TestClaimStateInTheDesksWords(t *testing.T) {
	d := &cyberdeskv1alpha1.Cyberdesk{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "desks", Generation: 1}}
	claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "desks"}}
	got := computeStatus(&scope{desk: d, claim: claim}, nil)
	if d.Status.Phase != cyberdeskv1alpha1.CyberdeskPending || got.State != conditions.Progressing || !strings.Contains(got.Message, "MachineClaim alice") {
		t.Errorf("a new claim: %s %v %q", d.Status.Phase, got.State, got.Message)
	}
	conditionstest.CheckSummary(t, d, got, true)

	conditions.Set(claim, 1, conditions.Summary{State: conditions.Progressing, Reason: "Stopping",
		Message: "deleting machine cyberdesk-alice failed, retrying: connection refused"})
	if err := deletionTrouble(claim); err == nil || err.Error() != "connection refused" {
		t.Errorf("deletion trouble %v, want the claim's reason", err)
	}
	conditions.Set(claim, 1, conditions.Summary{State: conditions.Progressing, Reason: "Stopping", Message: "deleting machine cyberdesk-alice (Expired)"})
	if err := deletionTrouble(claim); err != nil {
		t.Errorf("deletion going well, yet trouble %v", err)
	}
	for claimReason, want := range map[string]string{"Expired": ReasonTimedOut, "ShutDown": ReasonGuestShutdown, "MachineFailed": ReasonVMFailed, "Deleted": ReasonVMDeleted} {
		if got := deskReason(claimReason); got != want {
			t.Errorf("claim reason %s reads %s on the desk, want %s", claimReason, got, want)
		}
	}
}

// A desk whose VM name is taken is Pending, whichever way the claim came to
// say so: Stalled before its first checkpoint, or after its checkpoint had
// already made it Provisioning (the order a busy API server can give).
func TestTakenNameIsPendingInEveryOrder(t *testing.T) {
	for _, tc := range []struct {
		name       string
		claimPhase hypervisorv1alpha1.MachinePhase
		stalled    bool
	}{
		{"waiting before any checkpoint", "", false},
		{"stalled before any checkpoint", "", true},
		{"stalled after the checkpoint", hypervisorv1alpha1.MachineProvisioning, true},
		{"waiting after the checkpoint", hypervisorv1alpha1.MachineProvisioning, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "desks", Generation: 1}}
			claim.Status.Phase = tc.claimPhase
			state := conditions.Waiting
			if tc.stalled {
				state = conditions.Stalled
			}
			conditions.Set(claim, 1, conditions.Summary{State: state, Reason: claimNameTaken,
				Message: "VirtualMachine cyberdesk-alice exists and is not this claim's"})
			d := &cyberdeskv1alpha1.Cyberdesk{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "desks", Generation: 1}}
			d.Status.Phase = cyberdeskv1alpha1.CyberdeskProvisioning
			got := computeStatus(&scope{desk: d, claim: claim, blocked: blockerOf(claim)}, nil)
			if d.Status.Phase != cyberdeskv1alpha1.CyberdeskPending || got.Reason != ReasonVMNameTaken {
				t.Errorf("desk %s %s, want Pending %s", d.Status.Phase, got.Reason, ReasonVMNameTaken)
			}
		})
	}
}

// A desk whose claim stalled before its VM ever ran (the provider refused
// the template at create) is Pending, even when the claim's checkpoint had
// made it Provisioning first; one whose VM ran keeps its phase.
func TestAClaimStalledBeforeItsVMRanIsAPendingDesk(t *testing.T) {
	started := metav1.Now()
	for _, tc := range []struct {
		name       string
		claimPhase hypervisorv1alpha1.MachinePhase
		start      *metav1.Time
		want       cyberdeskv1alpha1.CyberdeskPhase
	}{
		{"before any checkpoint", "", nil, cyberdeskv1alpha1.CyberdeskPending},
		{"after the checkpoint", hypervisorv1alpha1.MachineProvisioning, nil, cyberdeskv1alpha1.CyberdeskPending},
		{"after its VM ran", hypervisorv1alpha1.MachineReady, &started, cyberdeskv1alpha1.CyberdeskRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "dave", Namespace: "desks", Generation: 1}}
			claim.Status.Phase, claim.Status.StartTime = tc.claimPhase, tc.start
			conditions.Set(claim, 1, conditions.Summary{State: conditions.Stalled, Reason: "TemplateInvalid",
				Message: "the template uses ${desk_owner}, which is not a variable"})
			d := &cyberdeskv1alpha1.Cyberdesk{ObjectMeta: metav1.ObjectMeta{Name: "dave", Namespace: "desks", Generation: 1}}
			d.Status.Phase = cyberdeskv1alpha1.CyberdeskProvisioning
			if tc.start != nil {
				d.Status.Phase = cyberdeskv1alpha1.CyberdeskRunning
			}
			got := computeStatus(&scope{desk: d, claim: claim, blocked: blockerOf(claim)}, nil)
			if d.Status.Phase != tc.want || got.Reason != "TemplateInvalid" || got.State != conditions.Stalled {
				t.Errorf("desk %s %s %v, want %s TemplateInvalid Stalled", d.Status.Phase, got.Reason, got.State, tc.want)
			}
		})
	}
}
