package cyberdesk

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/supabase"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// Reasons on the Ready condition that name why a desktop ended.
const (
	ReasonTimedOut      = "TimedOut"
	ReasonGuestShutdown = "GuestShutdown"
	ReasonVMFailed      = "VMFailed"
	ReasonVMDeleted     = "VMDeletedOutside"
)

// outcome is what a reconcile concluded; setStatus turns it into status.
type outcome struct {
	phase   cyberdeskv1alpha1.CyberdeskPhase
	state   conditions.State
	reason  string
	message string
	// skipStatus: the finalizer was removed; the object may be gone.
	skipStatus bool
}

func (r *Reconciler) setStatus(s *scope) {
	if s.outcome.skipStatus || s.outcome.reason == "" {
		return
	}
	d := s.desk
	d.Status.ObservedGeneration = d.Generation
	d.Status.Phase = s.outcome.phase
	conditions.Set(d, d.Generation, conditions.Summary{State: s.outcome.state, Reason: s.outcome.reason, Message: s.outcome.message})
}

// recordTransition emits an event on every phase change.
func (r *Reconciler) recordTransition(before, after *cyberdeskv1alpha1.Cyberdesk, s *scope) {
	if s.outcome.skipStatus || before.Status.Phase == after.Status.Phase || after.Status.Phase == "" {
		return
	}
	kind := corev1.EventTypeNormal
	if after.Status.Phase == cyberdeskv1alpha1.CyberdeskFailed || s.outcome.state == conditions.Stalled {
		kind = corev1.EventTypeWarning
	}
	from := before.Status.Phase
	if from == "" {
		from = "New"
	}
	r.Recorder.Eventf(after, nil, kind, string(after.Status.Phase), "Reconcile", "%s → %s: %s", from, after.Status.Phase, s.outcome.message)
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
