// Package conditions computes the kstatus conditions every reconciler owns —
// Ready, Reconciling, Stalled — from one summary of what it observed, so the
// three never contradict each other.
package conditions

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// State is what a reconcile concluded.
type State int

const (
	// Ready: the desired state is reached.
	Ready State = iota
	// Progressing: work is under way and expected to finish by itself.
	Progressing
	// Waiting: blocked on something outside the object that may change by
	// itself (an unreachable hypervisor, a dependency not ready); retried.
	Waiting
	// Stalled: cannot progress until a person changes something.
	Stalled
	// Finished: the object's work is over for good, as planned (a claim or
	// desk that expired, timed out or shut down). Like a completed Job it is
	// done, not failed: Ready=True with the reason that says how it ended,
	// so kstatus reads it Current and GitOps waits finish.
	Finished
)

// Summary is a reconcile's conclusion: a state, a CamelCase reason, and a
// message that says what is happening or what to do. No timestamps in
// messages: they would make every status write a change.
type Summary struct {
	State   State
	Reason  string
	Message string
}

// Set writes Ready, Reconciling and Stalled on obj for generation, following kstatus:
//   - Ready:       Ready=True; Reconciling and Stalled removed.
//   - Progressing: Ready=False, Reconciling=True.
//   - Waiting:     Ready=False; Reconciling and Stalled removed (kstatus: InProgress).
//   - Stalled:     Ready=False, Stalled=True (kstatus: Failed).
//   - Finished:    Ready=True with the reason; Reconciling and Stalled removed (kstatus: Current).
func Set(obj meta.ConditionsAccessor, generation int64, s Summary) {
	conds := obj.GetConditions()
	set := func(t string, status metav1.ConditionStatus) {
		apimeta.SetStatusCondition(&conds, metav1.Condition{
			Type: t, Status: status, Reason: s.Reason, Message: s.Message, ObservedGeneration: generation,
		})
	}
	switch s.State {
	case Ready, Finished:
		set(meta.ReadyCondition, metav1.ConditionTrue)
		apimeta.RemoveStatusCondition(&conds, meta.ReconcilingCondition)
		apimeta.RemoveStatusCondition(&conds, meta.StalledCondition)
	case Progressing:
		set(meta.ReadyCondition, metav1.ConditionFalse)
		set(meta.ReconcilingCondition, metav1.ConditionTrue)
		apimeta.RemoveStatusCondition(&conds, meta.StalledCondition)
	case Waiting:
		set(meta.ReadyCondition, metav1.ConditionFalse)
		apimeta.RemoveStatusCondition(&conds, meta.ReconcilingCondition)
		apimeta.RemoveStatusCondition(&conds, meta.StalledCondition)
	case Stalled:
		set(meta.ReadyCondition, metav1.ConditionFalse)
		set(meta.StalledCondition, metav1.ConditionTrue)
		apimeta.RemoveStatusCondition(&conds, meta.ReconcilingCondition)
	}
	obj.SetConditions(conds)
}

// IsReady reports whether obj's Ready condition is True for generation.
func IsReady(obj meta.ConditionsAccessor, generation int64) bool {
	c := apimeta.FindStatusCondition(obj.GetConditions(), meta.ReadyCondition)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == generation
}

// ReadyMessage returns the Ready condition's reason and message, for events.
func ReadyMessage(obj meta.ConditionsAccessor) (string, string) {
	c := apimeta.FindStatusCondition(obj.GetConditions(), meta.ReadyCondition)
	if c == nil {
		return "", ""
	}
	return c.Reason, c.Message
}
