package machineclaim

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// outcome is what a reconcile concluded; setStatus turns it into status.
type outcome struct {
	phase   hypervisorv1alpha1.MachinePhase
	state   conditions.State
	reason  string
	message string
	// skipStatus: the claim was released (finalizer removed); write nothing.
	skipStatus bool
}

func pending(state conditions.State, reason, message string) outcome {
	return outcome{phase: hypervisorv1alpha1.MachinePending, state: state, reason: reason, message: message}
}

func provisioning(progress string) outcome {
	if progress == "" {
		progress = "provisioning"
	}
	return outcome{phase: hypervisorv1alpha1.MachineProvisioning, state: conditions.Progressing, reason: "Provisioning",
		message: "the machine is being made: " + progress}
}

func stopping(message string) outcome {
	return outcome{phase: hypervisorv1alpha1.MachineStopping, state: conditions.Progressing, reason: "Stopping", message: message}
}

// ended is the outcome of a Terminated or Failed claim.
func ended(c *hypervisorv1alpha1.MachineClaim) outcome {
	if c.Status.Phase == hypervisorv1alpha1.MachineFailed {
		return outcome{phase: hypervisorv1alpha1.MachineFailed, state: conditions.Stalled, reason: c.Status.TerminationReason,
			message: "provisioning failed for good; delete the claim (or let its pool replace it)"}
	}
	return outcome{phase: hypervisorv1alpha1.MachineTerminated, state: conditions.Finished, reason: c.Status.TerminationReason,
		message: "the machine is gone; the claim remains as a record until deleted"}
}

// setStatus writes phase and the kstatus conditions from the outcome.
func (r *Reconciler) setStatus(s *scope) {
	if s.outcome.skipStatus || s.outcome.reason == "" {
		return
	}
	c := s.claim
	c.Status.ObservedGeneration = c.Generation
	c.Status.Phase = s.outcome.phase
	conditions.Set(c, c.Generation, conditions.Summary{State: s.outcome.state, Reason: s.outcome.reason, Message: s.outcome.message})
}

// recordTransition emits an event when the phase changes.
func (r *Reconciler) recordTransition(before, after *hypervisorv1alpha1.MachineClaim, s *scope) {
	if s.outcome.skipStatus || before.Status.Phase == after.Status.Phase || after.Status.Phase == "" {
		return
	}
	kind := corev1.EventTypeNormal
	if after.Status.Phase == hypervisorv1alpha1.MachineFailed || s.outcome.state == conditions.Stalled {
		kind = corev1.EventTypeWarning
	}
	from := before.Status.Phase
	if from == "" {
		from = "New"
	}
	r.Recorder.Eventf(after, nil, kind, string(after.Status.Phase), "Reconcile", "%s → %s: %s",
		from, after.Status.Phase, fmt.Sprint(s.outcome.message))
}
