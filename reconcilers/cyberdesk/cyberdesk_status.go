package cyberdesk

import (
	"fmt"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
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
	if st.VirtualMachineRef == nil {
		// The name is fixed by the desk's name, so recording it first
		// costs nothing and tells kubectl users where to look.
		st.VirtualMachineRef = &cyberdeskv1alpha1.VirtualMachineReference{Name: vmName(d), Namespace: d.Namespace}
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
	}
	return conditions.Summary{}
}

// endSummary records the desk's end: Terminated, or Failed when its VM failed.
func endSummary(d *cyberdeskv1alpha1.Cyberdesk, e *ending) conditions.Summary {
	d.Status.Phase = cyberdeskv1alpha1.CyberdeskTerminated
	advice, state := "the desktop has ended; delete the Cyberdesk when its record is no longer needed", conditions.Finished
	if e.reason == ReasonVMFailed {
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
// as read with the status as written; a Warning when the desk failed or
// stalled.
func (r *Reconciler) recordEvents(before, after *cyberdeskv1alpha1.Cyberdesk) {
	_, msg := conditions.ReadyMessage(after)
	warning := after.Status.Phase == cyberdeskv1alpha1.CyberdeskFailed ||
		apimeta.IsStatusConditionTrue(after.Status.Conditions, meta.StalledCondition)
	skeleton.PhaseEvent(r.Recorder, after, string(before.Status.Phase), string(after.Status.Phase), msg, warning)
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
