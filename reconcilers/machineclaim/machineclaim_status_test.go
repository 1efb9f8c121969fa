package machineclaim

import (
	"errors"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions/conditionstest"
)

// Every state a claim can be in, from the facts its phases record.
func TestComputeStatus(t *testing.T) {
	running := providers.Machine{Provisioned: true, State: providers.PowerRunning, Node: "pve1", Addresses: []string{"10.0.0.5"}}
	deleteErr := errors.New("503 Service Unavailable")
	cases := []struct {
		name string
		// phase and reason are the claim's status as read.
		phase  hypervisorv1alpha1.MachinePhase
		reason string
		facts  func(*scope)

		wantPhase  hypervisorv1alpha1.MachinePhase
		wantState  conditions.State
		wantReason string
		// wantNothing: the reconcile concluded nothing; no condition is set.
		wantNothing bool
	}{
		{name: "nothing observed (an API error before any phase concluded)", phase: hypervisorv1alpha1.MachineReady, facts: func(*scope) {},
			wantPhase: hypervisorv1alpha1.MachineReady, wantNothing: true},
		{name: "released", phase: hypervisorv1alpha1.MachineStopping, facts: func(s *scope) { s.released = true },
			wantPhase: hypervisorv1alpha1.MachineStopping, wantNothing: true},
		{name: "template missing", facts: func(s *scope) {
			s.blocked = &blocker{state: conditions.Waiting, reason: meta.DependencyNotFoundReason, message: "HypervisorMachineTemplate x (spec.templateRef) not found"}
		}, wantPhase: hypervisorv1alpha1.MachinePending, wantState: conditions.Waiting, wantReason: meta.DependencyNotFoundReason},
		{name: "permanent provider error stalls, back to Pending", phase: hypervisorv1alpha1.MachineProvisioning, facts: func(s *scope) {
			s.blocked = &blocker{state: conditions.Stalled, reason: "TemplateNotFound", message: "no template 9000"}
		}, wantPhase: hypervisorv1alpha1.MachinePending, wantState: conditions.Stalled, wantReason: "TemplateNotFound"},
		{name: "transient provider error keeps the phase", phase: hypervisorv1alpha1.MachineReady, facts: func(s *scope) {
			s.blocked = &blocker{state: conditions.Waiting, reason: "HypervisorError", message: "503", keepPhase: true}
		}, wantPhase: hypervisorv1alpha1.MachineReady, wantState: conditions.Waiting, wantReason: "HypervisorError"},
		{name: "transient provider error on a new claim", facts: func(s *scope) {
			s.blocked = &blocker{state: conditions.Waiting, reason: "HypervisorError", message: "503", keepPhase: true}
		}, wantPhase: hypervisorv1alpha1.MachinePending, wantState: conditions.Waiting, wantReason: "HypervisorError"},
		{name: "queued clone progresses", phase: hypervisorv1alpha1.MachineProvisioning, facts: func(s *scope) {
			s.blocked = &blocker{state: conditions.Progressing, reason: "CloneQueued", message: "at the clone limit", keepPhase: true}
		}, wantPhase: hypervisorv1alpha1.MachineProvisioning, wantState: conditions.Progressing, wantReason: "CloneQueued"},
		{name: "address pool exhausted", facts: func(s *scope) {
			s.blocked = &blocker{state: conditions.Waiting, reason: "AddressPoolExhausted", message: "all 2 addresses are taken"}
		}, wantPhase: hypervisorv1alpha1.MachinePending, wantState: conditions.Waiting, wantReason: "AddressPoolExhausted"},
		{name: "reference chosen", facts: func(s *scope) { s.progress = "chose machine hf-ns-box" },
			wantPhase: hypervisorv1alpha1.MachineProvisioning, wantState: conditions.Progressing, wantReason: "Provisioning"},
		{name: "cloning", phase: hypervisorv1alpha1.MachineProvisioning, facts: func(s *scope) {
			s.progress = "chose machine hf-ns-box"
			s.machine = &providers.Machine{State: providers.PowerProvisioning, Progress: "cloning"}
		}, wantPhase: hypervisorv1alpha1.MachineProvisioning, wantState: conditions.Progressing, wantReason: "Provisioning"},
		{name: "state unknown", phase: hypervisorv1alpha1.MachineReady, facts: func(s *scope) {
			s.machine = &providers.Machine{Provisioned: true, State: providers.PowerUnknown}
		}, wantPhase: hypervisorv1alpha1.MachineProvisioning, wantState: conditions.Progressing, wantReason: "Provisioning"},
		{name: "running without an address", phase: hypervisorv1alpha1.MachineProvisioning, facts: func(s *scope) {
			s.machine = &providers.Machine{Provisioned: true, State: providers.PowerRunning, Node: "pve1"}
		}, wantPhase: hypervisorv1alpha1.MachineRunning, wantState: conditions.Progressing, wantReason: "WaitingForAddress"},
		{name: "warm standby machine made", phase: hypervisorv1alpha1.MachineProvisioning, facts: func(s *scope) {
			s.machine = &providers.Machine{State: providers.PowerStopped, Node: "pve1", Warm: true}
		}, wantPhase: hypervisorv1alpha1.MachineWarm, wantState: conditions.Ready, wantReason: "Warm"},
		{name: "ready", phase: hypervisorv1alpha1.MachineRunning, facts: func(s *scope) { s.machine = &running },
			wantPhase: hypervisorv1alpha1.MachineReady, wantState: conditions.Ready, wantReason: "MachineReady"},
		{name: "retiring", phase: hypervisorv1alpha1.MachineReady, reason: ReasonExpired, facts: func(s *scope) {
			s.machine = &running
			s.deletion = &deletion{}
		}, wantPhase: hypervisorv1alpha1.MachineStopping, wantState: conditions.Progressing, wantReason: "Stopping"},
		{name: "retiring, delete failed", phase: hypervisorv1alpha1.MachineStopping, reason: ReasonShutDown, facts: func(s *scope) {
			s.deletion = &deletion{err: deleteErr}
		}, wantPhase: hypervisorv1alpha1.MachineStopping, wantState: conditions.Progressing, wantReason: "Stopping"},
		{name: "deleting the claim", phase: hypervisorv1alpha1.MachineReady, facts: func(s *scope) {
			s.deletion = &deletion{finalizing: true}
		}, wantPhase: hypervisorv1alpha1.MachineStopping, wantState: conditions.Progressing, wantReason: "Stopping"},
		{name: "deleting the claim, hypervisor unreachable", phase: hypervisorv1alpha1.MachineStopping, facts: func(s *scope) {
			s.deletion = &deletion{finalizing: true, err: deleteErr}
		}, wantPhase: hypervisorv1alpha1.MachineStopping, wantState: conditions.Progressing, wantReason: "Stopping"},
		{name: "deleting a Terminated claim whose hypervisor fails", phase: hypervisorv1alpha1.MachineTerminated, reason: ReasonExpired, facts: func(s *scope) {
			s.deletion = &deletion{finalizing: true, err: deleteErr}
		}, wantPhase: hypervisorv1alpha1.MachineStopping, wantState: conditions.Progressing, wantReason: "Stopping"},
		{name: "expired machine deleted", phase: hypervisorv1alpha1.MachineStopping, reason: ReasonExpired, facts: func(s *scope) {
			s.deletion = &deletion{}
			s.ended = "machine hf-ns-box deleted"
		}, wantPhase: hypervisorv1alpha1.MachineTerminated, wantState: conditions.Finished, wantReason: ReasonExpired},
		{name: "machine deleted outside", phase: hypervisorv1alpha1.MachineReady, reason: ReasonDeleted, facts: func(s *scope) {
			s.ended = "the machine was deleted outside HyperFleet"
		}, wantPhase: hypervisorv1alpha1.MachineTerminated, wantState: conditions.Finished, wantReason: ReasonDeleted},
		{name: "provisioning timed out", phase: hypervisorv1alpha1.MachineStopping, reason: ReasonProvisioningTimeout, facts: func(s *scope) {
			s.deletion = &deletion{}
			s.ended = "no machine was made"
		}, wantPhase: hypervisorv1alpha1.MachineFailed, wantState: conditions.Stalled, wantReason: ReasonProvisioningTimeout},
		{name: "Terminated stays", phase: hypervisorv1alpha1.MachineTerminated, reason: ReasonShutDown, facts: func(*scope) {},
			wantPhase: hypervisorv1alpha1.MachineTerminated, wantState: conditions.Finished, wantReason: ReasonShutDown},
		{name: "Failed stays", phase: hypervisorv1alpha1.MachineFailed, reason: ReasonProvisioningTimeout, facts: func(*scope) {},
			wantPhase: hypervisorv1alpha1.MachineFailed, wantState: conditions.Stalled, wantReason: ReasonProvisioningTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			claim := &hypervisorv1alpha1.MachineClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "ns", Generation: 2},
				Status: hypervisorv1alpha1.MachineClaimStatus{
					Phase: tc.phase, TerminationReason: tc.reason, MachineName: "hf-ns-box",
					Addresses: []hypervisorv1alpha1.MachineAddress{{Type: "IPv4", Address: "10.0.0.5"}},
				},
			}
			s := &scope{claim: claim, now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), timeout: 10 * time.Minute}
			tc.facts(s)
			got := computeStatus(s, nil)
			if claim.Status.Phase != tc.wantPhase {
				t.Errorf("phase %q, want %q", claim.Status.Phase, tc.wantPhase)
			}
			if tc.wantNothing {
				if got.Reason != "" {
					t.Errorf("summary %+v, want none", got)
				}
				return
			}
			if got.State != tc.wantState || got.Reason != tc.wantReason {
				t.Errorf("summary %+v, want state %d reason %s", got, tc.wantState, tc.wantReason)
			}
			if got.Message == "" {
				t.Errorf("message %q: want one", got.Message)
			}
			if terminal(claim.Status.Phase) && s.ended != "" && claim.Status.Addresses != nil {
				t.Errorf("a machine that is gone keeps its addresses: %v", claim.Status.Addresses)
			}
			// As the finalize-status step writes it after a successful reconcile.
			conditionstest.CheckSummary(t, claim, got, true)
			ready := apimeta.FindStatusCondition(claim.Status.Conditions, meta.ReadyCondition)
			// Finished (ended as planned) is Ready, as a completed Job is done.
			if wantReady := tc.wantState == conditions.Ready || tc.wantState == conditions.Finished; ready == nil || (ready.Status == metav1.ConditionTrue) != wantReady {
				t.Errorf("Ready condition %+v, want Ready=%v", ready, wantReady)
			}
			if stalled := apimeta.IsStatusConditionTrue(claim.Status.Conditions, meta.StalledCondition); stalled != (tc.wantState == conditions.Stalled) {
				t.Errorf("Stalled=%v, want %v", stalled, tc.wantState == conditions.Stalled)
			}
			if reconciling := apimeta.IsStatusConditionTrue(claim.Status.Conditions, meta.ReconcilingCondition); reconciling != (tc.wantState == conditions.Progressing) {
				t.Errorf("Reconciling=%v, want %v", reconciling, tc.wantState == conditions.Progressing)
			}
		})
	}
}

// The finalization deadline is told as a duration, never as a timestamp.
func TestDeletionMessageHasNoTimestamp(t *testing.T) {
	s := &scope{claim: &hypervisorv1alpha1.MachineClaim{}, timeout: 8 * time.Second,
		deletion: &deletion{finalizing: true, err: errors.New("503")}}
	want := "deleting the machine failed, retrying for up to 8s after the claim's deletion: 503"
	if got := deletionMessage(s); got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

// TestAttestedCondition: the Attested condition follows status.attestation
// in every phase, next to the claim's own summary; a claim of a template
// without attestation has none.
func TestAttestedCondition(t *testing.T) {
	running := providers.Machine{Provisioned: true, State: providers.PowerRunning, Node: "n1", Addresses: []string{"10.0.0.5"}}
	tok, tpm := hypervisorv1alpha1.AttestationJoinToken, hypervisorv1alpha1.AttestationTPM
	cases := []struct {
		method     hypervisorv1alpha1.AttestationMethod
		phase      hypervisorv1alpha1.AttestationPhase
		wantStatus metav1.ConditionStatus
		wantReason string
		// wantWords: the message says how this method attests or failed.
		wantWords string
	}{
		{tok, hypervisorv1alpha1.AttestationPending, metav1.ConditionFalse, ReasonAttestationPending, "join token"},
		{tok, hypervisorv1alpha1.AttestationAttested, metav1.ConditionTrue, "Attested", ""},
		{tok, hypervisorv1alpha1.AttestationCredentialsReleased, metav1.ConditionTrue, "CredentialsReleased", ""},
		{tok, hypervisorv1alpha1.AttestationFailed, metav1.ConditionFalse, ReasonAttestationFailed, "join token expired"},
		{tpm, hypervisorv1alpha1.AttestationPending, metav1.ConditionFalse, ReasonAttestationPending, "TPM DevID (subject CN uid-7)"},
		{tpm, hypervisorv1alpha1.AttestationAttested, metav1.ConditionTrue, "Attested", ""},
		{tpm, hypervisorv1alpha1.AttestationFailed, metav1.ConditionFalse, ReasonAttestationFailed, "provisioned with a DevID"},
	}
	for _, c := range cases {
		t.Run(string(c.method)+"/"+string(c.phase), func(t *testing.T) {
			claim := &hypervisorv1alpha1.MachineClaim{}
			claim.Generation, claim.UID = 3, "uid-7"
			claim.Status.Attestation = &hypervisorv1alpha1.MachineAttestationStatus{Method: c.method, Phase: c.phase, SPIFFEID: "spiffe://td/hyperfleet/i/MachineClaim/ns/n/u/bootstrap"}
			m := running
			s := &scope{claim: claim, machine: &m}
			summary := computeStatus(s, nil)
			if summary.State != conditions.Ready {
				t.Fatalf("the claim's summary is %v; attestation must not change it", summary.State)
			}
			got := apimeta.FindStatusCondition(claim.Status.Conditions, ConditionAttested)
			if got == nil || got.Status != c.wantStatus || got.Reason != c.wantReason || got.Message == "" || got.ObservedGeneration != 3 {
				t.Fatalf("Attested = %+v, want %s %s with a message", got, c.wantStatus, c.wantReason)
			}
			if !strings.Contains(got.Message, c.wantWords) {
				t.Fatalf("Attested message %q does not say %q", got.Message, c.wantWords)
			}
		})
	}
	claim := &hypervisorv1alpha1.MachineClaim{}
	m := running
	computeStatus(&scope{claim: claim, machine: &m}, nil)
	if apimeta.FindStatusCondition(claim.Status.Conditions, ConditionAttested) != nil {
		t.Fatal("a claim without attestation has an Attested condition")
	}
	failed := &hypervisorv1alpha1.MachineClaim{}
	failed.Status.TerminationReason = ReasonAttestationFailed
	if summary := computeStatus(&scope{claim: failed, ended: "machine x deleted"}, nil); failed.Status.Phase != hypervisorv1alpha1.MachineFailed || summary.State != conditions.Stalled {
		t.Fatalf("a claim retired for attestation: %s, %v; want Failed, Stalled", failed.Status.Phase, summary.State)
	}
}
