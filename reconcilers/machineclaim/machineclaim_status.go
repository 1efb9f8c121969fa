package machineclaim

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// blocker is why a claim cannot go on: a dependency missing or not ready,
// a provider error, no free address.
type blocker struct {
	state           conditions.State
	reason, message string
	// keepPhase: a passing provider error leaves the phase as it was (a
	// Ready machine the hypervisor briefly does not answer for stays Ready);
	// any other blocker puts the claim back to Pending.
	keepPhase bool
}

// deletion is a machine being deleted.
type deletion struct {
	// finalizing: because the claim is being deleted (else the claim is
	// retiring its machine: expired, shut down, timed out).
	finalizing bool
	// err is the last delete call's failure; nil while it is under way.
	err error
}

// computeStatus sets status.phase (and drops the addresses of a machine
// that is gone) from what the phases observed, and returns the conditions'
// summary. It reads nothing but s, so it is table-tested on its own. An
// empty summary means the reconcile concluded nothing new: the conditions
// stay as they are (a reconcile that failed before observing anything).
func computeStatus(s *scope, _ error) conditions.Summary {
	c := s.claim
	var (
		phase   hypervisorv1alpha1.MachinePhase
		summary conditions.Summary
	)
	switch {
	case s.released:
		return conditions.Summary{}
	case s.ended != "":
		phase = hypervisorv1alpha1.MachineTerminated
		if r := c.Status.TerminationReason; r == ReasonProvisioningTimeout || r == ReasonAttestationFailed || r == ReasonReferencesExhausted {
			phase = hypervisorv1alpha1.MachineFailed
		}
		c.Status.Addresses = nil
		summary = endedSummary(phase, c.Status.TerminationReason, s.ended)
	case s.deletion != nil:
		phase = hypervisorv1alpha1.MachineStopping
		summary = conditions.Summary{State: conditions.Progressing, Reason: "Stopping", Message: deletionMessage(s)}
	case terminal(c.Status.Phase):
		phase = c.Status.Phase
		summary = endedSummary(phase, c.Status.TerminationReason, "")
	case s.blocked != nil:
		phase = hypervisorv1alpha1.MachinePending
		if s.blocked.keepPhase && c.Status.Phase != "" {
			phase = c.Status.Phase
		}
		summary = conditions.Summary{State: s.blocked.state, Reason: s.blocked.reason, Message: s.blocked.message}
	case s.machine != nil:
		phase, summary = machineStatus(c, *s.machine)
	case s.progress != "":
		phase, summary = hypervisorv1alpha1.MachineProvisioning, provisioning(c)
	default:
		return conditions.Summary{}
	}
	c.Status.Phase = phase
	if cond := attestedCondition(c); cond != nil {
		apimeta.SetStatusCondition(&c.Status.Conditions, *cond)
	}
	return summary
}

// machineStatus is the phase of a machine as the provider reported it.
func machineStatus(c *hypervisorv1alpha1.MachineClaim, m providers.Machine) (hypervisorv1alpha1.MachinePhase, conditions.Summary) {
	switch {
	case m.Warm:
		return hypervisorv1alpha1.MachineWarm, conditions.Summary{State: conditions.Ready, Reason: "Warm",
			Message: fmt.Sprintf("machine %s is warm: cloned and powered off, for a claim to take, configure and boot", c.Status.MachineName)}
	case !m.Provisioned || m.State == providers.PowerProvisioning || m.State == providers.PowerUnknown:
		return hypervisorv1alpha1.MachineProvisioning, provisioning(c)
	case len(m.Addresses) == 0:
		// Written only once the guest has been silent for addressGrace
		// (booting.go): a normal boot goes from Provisioning to Ready.
		return hypervisorv1alpha1.MachineRunning, conditions.Summary{State: conditions.Progressing, Reason: "WaitingForAddress",
			Message: fmt.Sprintf("machine %s has run for %s and its guest has reported no address yet; check that the image starts the guest agent (qemu-guest-agent) and that it gets an address on its network",
				c.Status.MachineName, addressGrace)}
	}
	return hypervisorv1alpha1.MachineReady, conditions.Summary{State: conditions.Ready, Reason: "MachineReady",
		Message: fmt.Sprintf("machine %s is ready at %s on %s", c.Status.MachineName, m.Addresses[0], m.Node)}
}

// provisioning is the summary of a machine being made. It names no step
// (cloning, growing the disk, starting, booting): one message from the
// choice of the machine's name until its guest reports an address means
// one status write, not one per step.
func provisioning(c *hypervisorv1alpha1.MachineClaim) conditions.Summary {
	msg := "the machine is being made; Ready once it runs and its guest reports an address"
	if c.Status.MachineName != "" {
		msg = "machine " + c.Status.MachineName + " is being made; Ready once it runs and its guest reports an address"
	}
	return conditions.Summary{State: conditions.Progressing, Reason: "Provisioning", Message: msg}
}

func deletionMessage(s *scope) string {
	c, d := s.claim, s.deletion
	switch {
	case d.finalizing && d.err != nil:
		// The deadline is given as a duration: a timestamp in a message
		// would make every status write a change.
		return fmt.Sprintf("deleting the machine failed, retrying for up to %s after the claim's deletion: %v", s.timeout, d.err)
	case d.finalizing:
		return "deleting the machine because the claim is being deleted"
	case d.err != nil:
		return fmt.Sprintf("deleting machine %s failed, retrying: %v", c.Status.MachineName, d.err)
	}
	return fmt.Sprintf("deleting machine %s (%s)", c.Status.MachineName, c.Status.TerminationReason)
}

// endedSummary is the summary of a Terminated or Failed claim; how, when
// set, says how the machine went in this very reconcile.
func endedSummary(phase hypervisorv1alpha1.MachinePhase, reason, how string) conditions.Summary {
	s := conditions.Summary{State: conditions.Finished, Reason: reason,
		Message: "the machine is gone; the claim remains as a record until deleted"}
	if phase == hypervisorv1alpha1.MachineFailed {
		s = conditions.Summary{State: conditions.Stalled, Reason: reason,
			Message: "provisioning failed for good; delete the claim (or let its pool replace it)"}
	}
	if how != "" {
		s.Message = how + "; " + s.Message
	}
	return s
}

func terminal(p hypervisorv1alpha1.MachinePhase) bool {
	return p == hypervisorv1alpha1.MachineTerminated || p == hypervisorv1alpha1.MachineFailed
}

// recordTransition emits an event named for the new phase when the phase
// changed: a Warning for Failed or Stalled. The steps of a normal start
// (queued for a turn, being made) are no event, as a Performer's normal start is
// none: every claim takes them, and an event is an API-server write per
// claim of a burst. Ready is one, and so is every step back or failure.
func (r *Reconciler) recordTransition(c *hypervisorv1alpha1.MachineClaim, from hypervisorv1alpha1.MachinePhase, summary conditions.Summary, s *scope) {
	if s.released || summary.Reason == "" {
		return
	}
	warning := c.Status.Phase == hypervisorv1alpha1.MachineFailed || summary.State == conditions.Stalled
	to := c.Status.Phase
	// Waiting for a turn (a clone slot) is a normal start under a burst,
	// Pending with Reconciling: any other wait is worth an event.
	queued := from == "" && to == hypervisorv1alpha1.MachinePending && summary.State == conditions.Progressing
	// Running is no normal step: it is written only for a guest silent
	// past addressGrace, which is worth an event.
	normalStart := queued ||
		(to == hypervisorv1alpha1.MachineProvisioning && (from == "" || from == hypervisorv1alpha1.MachinePending))
	if normalStart && !warning {
		return
	}
	skeleton.PhaseEvent(r.Recorder, c, string(from), string(c.Status.Phase), summary.Message, warning)
}
