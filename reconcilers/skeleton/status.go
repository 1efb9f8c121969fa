package skeleton

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// Object is a HyperFleet kind: an API object whose status carries the
// kstatus conditions and observedGeneration.
type Object interface {
	client.Object
	meta.ConditionsAccessor
	meta.ObservedGenerationAccessor
}

// ConflictRequeue is how soon a reconcile that met a conflict looks again:
// the cache is behind the object's latest write, typically our own.
const ConflictRequeue = time.Second

// StatusPatch is the deferred finalize-status step of one reconcile. It
// remembers the object as read, and at the end writes the difference.
type StatusPatch struct {
	client client.Client
	obj    Object
	before Object
	// read is the object as read, kept when Rebase moves before on.
	read     Object
	released bool
	// concluded: Finalize wrote (or found nothing to write) a status that
	// describes this reconcile; false after a conflict or a release.
	concluded bool
	// checkpoints are the resourceVersions Checkpoint wrote, in order.
	checkpoints []string
}

// NewStatusPatch remembers obj as read, before any phase changes it.
func NewStatusPatch(c client.Client, obj Object) *StatusPatch {
	before := obj.DeepCopyObject().(Object)
	return &StatusPatch{client: c, obj: obj, before: before, read: before}
}

// Read is the object as it was read, before any phase or Rebase: what an
// event policy compares the written status with.
func (p *StatusPatch) Read() Object { return p.read }

// Before is the object as it was read (or last written by Rebase).
func (p *StatusPatch) Before() Object { return p.before }

// Rebase takes obj as it now is as the base of the final patch: call it
// after a phase wrote the object itself (added a finalizer, recorded a
// machine name before a create call), so Finalize writes only what changed
// since.
func (p *StatusPatch) Rebase() { p.before = p.obj.DeepCopyObject().(Object) }

// Release says the object let go of its finalizer and may be gone: Finalize
// writes nothing.
func (p *StatusPatch) Release() { p.released = true }

// Released reports whether the object let go of its finalizer in this
// reconcile.
func (p *StatusPatch) Released() bool { return p.released }

// Concluded reports whether Finalize settled the status of this reconcile:
// not after a conflict (the read was stale) nor a release (the object may be
// gone). Events that compare the status before and after follow it.
func (p *StatusPatch) Concluded() bool { return p.concluded }

// StatusWriteTimeout bounds the status write of a reconcile whose own
// context has ended.
const StatusWriteTimeout = 10 * time.Second

// Finalize is every reconciler's deferred last step (Flux's finalizeStatus):
//   - A conflict, or an AlreadyExists from a create the cache had not yet
//     shown, is requeued silently: nothing is written from a stale read, and
//     no error reaches the log.
//   - A StalledError sets Stalled with its reason and message and is
//     returned as a terminal error: retrying cannot help until the object
//     changes, which triggers a reconcile by itself.
//   - Otherwise the conditions are set from summary (left alone when its
//     Reason is empty: the reconcile concluded nothing new).
//   - status.observedGeneration is stamped only when the reconcile
//     succeeded (or stalled for good); after an error it keeps the value it
//     had, since the status may not yet describe this generation.
//   - Nothing is written when nothing changed.
func (p *StatusPatch) Finalize(ctx context.Context, summary conditions.Summary, result ctrl.Result, err error) (ctrl.Result, error) {
	if IsConflict(err) {
		return ctrl.Result{RequeueAfter: ConflictRequeue}, nil
	}
	if p.released {
		return result, err
	}
	var stalled *StalledError
	terminal := errors.As(err, &stalled)
	if terminal {
		summary = conditions.Summary{State: conditions.Stalled, Reason: stalled.Reason, Message: stalled.Message}
	}
	obj := p.obj
	gen := obj.GetGeneration()
	if summary.Reason != "" {
		conditions.Set(obj, gen, summary)
	}
	switch {
	case obj.GetDeletionTimestamp() != nil && summary.Reason == "":
		// Deletion bumps the generation. A reconcile of an object being
		// deleted that concluded nothing new (a deletion under way, as
		// asked) does not stamp it: kstatus reads deletionTimestamp before
		// observedGeneration and says Terminating, and the stamp alone
		// would be one more write per object about to go.
		obj.SetObservedGeneration(p.before.GetObservedGeneration())
	case err == nil || terminal:
		obj.SetObservedGeneration(gen)
	default:
		obj.SetObservedGeneration(p.before.GetObservedGeneration())
	}
	// The check sees the status as this reconcile concluded it: the patch
	// response may carry a newer generation, written by someone else since
	// the read, which the next reconcile is for.
	concluded := obj.DeepCopyObject().(Object)
	writeCtx := ctx
	if ctx.Err() != nil {
		// The reconcile ran out of its time (the manager's reconcile
		// timeout, a hung outside call): the status must still say so, or
		// the object would keep its last, now false, conditions.
		var cancel context.CancelFunc
		writeCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), StatusWriteTimeout)
		defer cancel()
	}
	if perr := conditions.PatchStatus(writeCtx, p.client, p.before, obj); perr != nil {
		if IsConflict(perr) {
			return ctrl.Result{RequeueAfter: ConflictRequeue}, nil
		}
		if err == nil {
			return result, fmt.Errorf("writing status: %w", perr)
		}
	}
	p.concluded = true
	notify(concluded, err == nil || terminal)
	if terminal {
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	return result, err
}

// Checkpoint writes the status now, in the middle of a reconcile, before a
// call that must find it recorded (a machine's reference before its create
// call, so a crash after the call finds the same machine instead of making
// a twin), and takes the result as the base of the final write.
func (p *StatusPatch) Checkpoint(ctx context.Context, summary conditions.Summary) error {
	obj := p.obj
	if summary.Reason != "" {
		conditions.Set(obj, obj.GetGeneration(), summary)
	}
	obj.SetObservedGeneration(obj.GetGeneration())
	concluded := obj.DeepCopyObject().(Object)
	if err := conditions.PatchStatus(ctx, p.client, p.before, obj); err != nil {
		return err
	}
	notify(concluded, true)
	p.checkpoints = append(p.checkpoints, obj.GetResourceVersion())
	p.Rebase()
	return nil
}

// Checkpoints are the resourceVersions the reconcile's checkpoints wrote,
// in order: versions a cache may show after the reconcile, older than its
// final write.
func (p *StatusPatch) Checkpoints() []string { return p.checkpoints }

// IsConflict reports a conflict, or a create of something that exists
// already: both mean the cache is behind the latest write.
func IsConflict(err error) bool {
	return err != nil && (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err))
}

// StalledError is a failure no retry can fix: the object must change (a
// field to correct, a reference to create). Finalize makes it the Stalled
// condition and a terminal error.
type StalledError struct {
	// Reason is a CamelCase condition reason.
	Reason string
	// Message names the field and says what to change.
	Message string
}

func (e *StalledError) Error() string { return e.Reason + ": " + e.Message }

// Stalled returns a StalledError.
func Stalled(reason, message string) error { return &StalledError{Reason: reason, Message: message} }

// PhaseEvent records a phase transition, "Provisioning → Ready: message",
// as an event named for the new phase; a Warning when warning is set.
func PhaseEvent(rec events.EventRecorder, obj runtime.Object, from, to, message string, warning bool) {
	if from == to || to == "" {
		return
	}
	if from == "" {
		from = "New"
	}
	rec.Eventf(obj, nil, eventType(warning), to, "Reconcile", "%s → %s: %s", from, to, message)
}

// ReasonEvent records a change of the Ready condition's reason as an event
// named for the new reason, with its message.
func ReasonEvent(rec events.EventRecorder, before, after Object, action string, warning bool) {
	old, _ := conditions.ReadyMessage(before)
	reason, msg := conditions.ReadyMessage(after)
	if reason == old || reason == "" {
		return
	}
	rec.Eventf(after, nil, eventType(warning), reason, action, "%s", msg)
}

func eventType(warning bool) string {
	if warning {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// A check, when set, sees every object after its finalize-status step, and
// whether the reconcile concluded (succeeded, or stalled for good) so that
// its status must describe the current generation: the test suites install the kstatus check here so
// that every reconcile of every kind is checked, not only the ones a test
// asserts on.
var check atomic.Pointer[func(Object, bool)]

// SetCheck installs f as the check (nil removes it). Tests only.
func SetCheck(f func(obj Object, concluded bool)) {
	if f == nil {
		check.Store(nil)
		return
	}
	check.Store(&f)
}

func notify(obj Object, concluded bool) {
	if f := check.Load(); f != nil {
		(*f)(obj, concluded)
	}
}
