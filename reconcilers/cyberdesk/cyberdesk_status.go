package cyberdesk

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/supabase"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Reasons on the Ready condition that name why a desktop ended.
const (
	ReasonTimedOut      = "TimedOut"
	ReasonGuestShutdown = "GuestShutdown"
	ReasonVMFailed      = "VMFailed"
	ReasonVMDeleted     = "VMDeletedOutside"
)

// ReasonTemplateAdjusted is the Warning event for a template field the
// VM was made without (providers.Machine.Notices).
const ReasonTemplateAdjusted = "TemplateAdjusted"

// stateStopping is the kstatus state of a desk removing its VM.
const stateStopping = conditions.Progressing

// computeStatus sets the status fields (phase, VM reference, node, address,
// start and expiry) from what the phases observed and decided, and returns
// the summary the Ready, Reconciling and Stalled conditions show. It is
// pure: the same observations give the same status.
func computeStatus(s *scope, err error) conditions.Summary {
	d := s.desk
	st := &d.Status
	switch {
	case s.released:
		return conditions.Summary{}
	case !d.DeletionTimestamp.IsZero():
		st.Phase = cyberdeskv1alpha1.CyberdeskStopping
		msg := "deleting VM " + vmName(d) + " because the Cyberdesk is being deleted"
		if s.deleteErr != nil {
			msg = fmt.Sprintf("deleting VM %s failed, retrying: %v", vmName(d), s.deleteErr)
		}
		return conditions.Summary{State: stateStopping, Reason: meta.DeletingReason, Message: msg}
	case err != nil:
		// The phases turn provider failures into status themselves: an
		// error is an API write that failed before they ran, and nothing
		// was learned.
		return conditions.Summary{}
	}
	if name := deskVMName(d, s.claim); name != "" && (st.VirtualMachineRef == nil || st.VirtualMachineRef.Name != name) {
		// A desk's own VM's name is fixed by the desk's name, so
		// recording it first costs nothing and tells kubectl users where
		// to look; a hot machine's is known once its claim took it.
		st.VirtualMachineRef = &cyberdeskv1alpha1.VirtualMachineReference{Name: name, Namespace: d.Namespace}
	}
	if m := s.machine; m != nil {
		if m.UID != "" {
			st.VirtualMachineRef.UID = m.UID
		}
		if m.Node != "" {
			st.NodeName = m.Node
		}
		if len(m.Addresses) > 0 {
			st.IPAddress = m.Addresses[0]
		}
	}
	if s.started != nil {
		st.StartTime, st.ExpiryTime = s.started, s.expiry
	}
	switch {
	case s.ended != nil:
		return endSummary(d, s.ended)
	case s.retire != "":
		st.Phase = cyberdeskv1alpha1.CyberdeskStopping
		msg := fmt.Sprintf("shutting down and deleting VM %s (%s)", vmName(d), s.retire)
		if s.deleteErr != nil {
			msg = fmt.Sprintf("deleting VM %s failed, retrying: %v", vmName(d), s.deleteErr)
		}
		return conditions.Summary{State: stateStopping, Reason: s.retire, Message: msg}
	case s.blocked != nil:
		switch {
		case s.blocked.phase != "":
			st.Phase = s.blocked.phase
		case st.Phase == "":
			st.Phase = cyberdeskv1alpha1.CyberdeskPending
		}
		return conditions.Summary{State: s.blocked.state, Reason: s.blocked.reason, Message: s.blocked.message}
	case st.Phase == cyberdeskv1alpha1.CyberdeskTerminated, st.Phase == cyberdeskv1alpha1.CyberdeskFailed:
		return endedSummary(d)
	case s.machine != nil && s.machine.State == providers.PowerRunning:
		st.Phase = cyberdeskv1alpha1.CyberdeskRunning
		msg := fmt.Sprintf("VM %s runs on %s", vmName(d), s.machine.Node)
		if st.IPAddress != "" {
			msg += " at " + st.IPAddress
		}
		return conditions.Summary{State: conditions.Ready, Reason: "Running", Message: msg}
	case s.machine != nil:
		st.Phase = cyberdeskv1alpha1.CyberdeskProvisioning
		return conditions.Summary{State: conditions.Progressing, Reason: "Provisioning",
			Message: fmt.Sprintf("VM %s: %s", vmName(d), s.machine.Progress)}
	case s.claim != nil:
		if st.Phase == "" {
			st.Phase = cyberdeskv1alpha1.CyberdeskPending
		}
		return conditions.Summary{State: conditions.Progressing, Reason: "Pending",
			Message: fmt.Sprintf("MachineClaim %s is making VM %s", s.claim.Name, vmName(d))}
	}
	return conditions.Summary{}
}

// deskVMName is the name of the desk's VM as far as it is known: the one
// its claim holds, else the one the claim asks for; "" while a claim that
// takes a hot machine has not taken one yet.
func deskVMName(d *cyberdeskv1alpha1.Cyberdesk, c *hypervisorv1alpha1.MachineClaim) string {
	switch {
	case c == nil:
		return vmName(d)
	case c.Status.MachineName != "":
		return c.Status.MachineName
	}
	return c.Spec.MachineName
}

// endSummary records the desk's end: Terminated, or Failed when its VM failed.
func endSummary(d *cyberdeskv1alpha1.Cyberdesk, e *ending) conditions.Summary {
	d.Status.Phase = cyberdeskv1alpha1.CyberdeskTerminated
	advice, state := "the desktop has ended; delete the Cyberdesk when its record is no longer needed", conditions.Finished
	if e.reason == ReasonVMFailed || e.failed {
		d.Status.Phase = cyberdeskv1alpha1.CyberdeskFailed
		advice, state = "the desktop's VM failed; delete the Cyberdesk and create a new one (kubectl get events shows why)", conditions.Stalled
	}
	d.Status.IPAddress = ""
	return conditions.Summary{State: state, Reason: e.reason, Message: e.what + "; " + advice}
}

// endedSummary is the summary of a desk that is over: what the Ready
// condition already says, stamped with the current generation.
func endedSummary(d *cyberdeskv1alpha1.Cyberdesk) conditions.Summary {
	reason, msg := conditions.ReadyMessage(d)
	if reason == "" {
		reason, msg = "Ended", "the desktop has ended"
	}
	if d.Status.Phase == cyberdeskv1alpha1.CyberdeskFailed {
		return conditions.Summary{State: conditions.Stalled, Reason: reason, Message: msg}
	}
	return conditions.Summary{State: conditions.Finished, Reason: reason, Message: msg}
}

// recordEvents emits an event on every phase change, comparing the status
// as read with the status as written, a Warning when the desk failed or
// stalled; and counts, once each, as the status records them, the VM made,
// timed out and removed. A status written is what makes each count happen
// once, across restarts and stale reads (the driver calls this only after
// the write concluded).
func (r *Reconciler) recordEvents(s *scope, before, after *cyberdeskv1alpha1.Cyberdesk) {
	_, msg := conditions.ReadyMessage(after)
	warning := after.Status.Phase == cyberdeskv1alpha1.CyberdeskFailed ||
		apimeta.IsStatusConditionTrue(after.Status.Conditions, meta.StalledCondition)
	skeleton.PhaseEvent(r.Recorder, after, string(before.Status.Phase), string(after.Status.Phase), msg, warning)
	if vmUID(before) == "" && vmUID(after) != "" && r.once(after, func(c *counts) *bool { return &c.created }) {
		vmCreated.Inc()
		operationDuration.WithLabelValues("create").Observe(s.now.Sub(after.CreationTimestamp.Time).Seconds())
		if name := vmName(after); name != fixedVMName(after) {
			r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "VMCreated", "Create", "Took hot VirtualMachine %s, made ahead from the Cyberdesk template", name)
		} else {
			r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "VMCreated", "Create", "Created VirtualMachine %s from the Cyberdesk template", name)
		}
	}
	reason := func(d *cyberdeskv1alpha1.Cyberdesk) string {
		if d.Status.Phase != cyberdeskv1alpha1.CyberdeskStopping && !ended(d) {
			return ""
		}
		r, _ := conditions.ReadyMessage(d)
		return r
	}
	if reason(before) != ReasonTimedOut && reason(after) == ReasonTimedOut && r.once(after, func(c *counts) *bool { return &c.timedOut }) {
		vmTimeout.Inc()
		if exp := after.Status.ExpiryTime; exp != nil {
			operationDuration.WithLabelValues("timeout").Observe(max(s.now.Sub(exp.Time), 0).Seconds())
		}
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, ReasonTimedOut, "Timeout",
			"Cyberdesk ran for its timeoutMs (%d); shutting down VM %s", timeoutMs(after), vmName(after))
	}
	if hasVM(before) && !hasVM(after) && vmUID(before) != "" && r.once(after, func(c *counts) *bool { return &c.deleted }) {
		vmDeleted.Inc()
	}
	if before.Status.Phase != after.Status.Phase && after.Status.Phase == cyberdeskv1alpha1.CyberdeskStopping {
		switch why := reason(after); why {
		case ReasonGuestShutdown:
			r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, why, "Observe", "The guest of VM %s shut down; removing the VM", vmName(after))
		case ReasonVMFailed:
			r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, why, "Observe", "VM %s failed; removing it", vmName(after))
		}
	}
}

func vmUID(d *cyberdeskv1alpha1.Cyberdesk) string {
	if ref := d.Status.VirtualMachineRef; ref != nil {
		return ref.UID
	}
	return ""
}

// row is the desk's status as the Supabase table holds it.
func row(d *cyberdeskv1alpha1.Cyberdesk, now time.Time) supabase.Row {
	r := supabase.Row{
		ID: d.Name, Namespace: d.Namespace, Status: strings.ToLower(string(d.Status.Phase)),
		IPAddress: d.Status.IPAddress, NodeName: d.Status.NodeName, TimeoutMs: d.Spec.TimeoutMs, UpdatedTime: now.UTC(),
	}
	if r.Status == "" {
		r.Status = "pending"
	}
	if ref := d.Status.VirtualMachineRef; ref != nil {
		r.VMName = ref.Name
	}
	if t := d.Status.StartTime; t != nil {
		v := t.UTC()
		r.StartTime = &v
	}
	if t := d.Status.ExpiryTime; t != nil {
		v := t.UTC()
		r.ExpiryTime = &v
	}
	if _, msg := conditions.ReadyMessage(d); msg != "" {
		r.Message = msg
	}
	return r
}
