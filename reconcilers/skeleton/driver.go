package skeleton

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// Kind is what one kind supplies to the Driver: its object and scope, its
// phases, its status function and event policy, and what it remembers of
// each object between reconciles. T is the kind's object type, S its scope
// (what one reconcile reads and observes).
type Kind[T Object, S any] struct {
	// New returns an empty object to read into.
	New func() T
	// Scope starts a reconcile's scope over the object as read. The patch is
	// for phases that write the object themselves (Rebase, Checkpoint,
	// ReleaseFinalizer).
	Scope func(obj T, patch *StatusPatch) S
	// Finalizer, when set, is added before the phases run. An object being
	// deleted without it has been let go already: the deletion phases do not
	// run and nothing is written.
	Finalizer string
	// Phases run, in order, on an object that is not being deleted.
	Phases []Phase[S]
	// Deletion runs, in order, on an object being deleted; the phase that
	// finds the outside world clean releases the finalizer
	// (StatusPatch.ReleaseFinalizer). Empty for a kind whose children go
	// with it through owner references: only its status is finalized.
	Deletion []Phase[S]
	// Status is the kind's computeStatus: a pure function of the scope and
	// the reconcile's error, run once at the end of every reconcile.
	Status func(s S, err error) conditions.Summary
	// Events is the kind's event policy, run after Finalize concluded the
	// status (neither a conflict nor a release). read is the object as the
	// reconcile read it, written as it is now; summary is what Status
	// returned. After a conflict nothing is emitted: the read was stale,
	// and the reconcile that follows sees the same change and reports it.
	Events func(s S, read, written T, summary conditions.Summary)
	// Memory is what the kind keeps per object between reconciles: the
	// driver forgets it when the object is gone, or let go of its finalizer.
	Memory []Forgetter
	// Gone, when set, runs when the object is not found, after its memory
	// was forgotten: work the kind does for the objects left (a namespace's
	// shared object).
	Gone func(ctx context.Context, key types.NamespacedName) error
	// Written, with CopyStatus, keeps the status this process last wrote
	// until the cache shows it (WrittenStatus). Only a kind whose
	// reconciles are triggered faster than the cache catches up with its
	// own writes needs it.
	Written *WrittenStatus[T]
	// CopyStatus copies src's status into dst, deeply.
	CopyStatus func(dst, src T)
}

// Forgetter is per-object memory the driver drops when the object goes.
type Forgetter interface {
	Forget(key types.NamespacedName)
}

// Driver is the Reconcile every kind shares (after crossplane's managed
// reconciler): it reads the object, refuses one it cannot decode, keeps the
// finalizer, runs the kind's phases or deletion phases, finalizes the status
// once (StatusPatch.Finalize), emits the kind's events only after the status
// concluded, and forgets the object's memory when it is gone.
type Driver[T Object, S any] struct {
	Client   client.Client
	Recorder events.EventRecorder
	Kind     Kind[T, S]
}

// Reconcile reconciles the object req names.
func (d *Driver[T, S]) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	k := &d.Kind
	key := req.NamespacedName
	obj := k.New()
	if err := d.Client.Get(ctx, key, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		d.forget(key)
		if k.Gone != nil {
			return ctrl.Result{}, k.Gone(ctx, key)
		}
		return ctrl.Result{}, nil
	}
	if stop, res, err := RefuseUndecodable(ctx, d.Client, d.Recorder, obj); stop {
		return res, err
	}
	written, overlaid := k.Written != nil && k.CopyStatus != nil, false
	if written {
		overlaid = k.Written.overlay(key, obj, k.CopyStatus)
	}
	readRV := obj.GetResourceVersion()
	patch := NewStatusPatch(d.Client, obj)
	s := k.Scope(obj, patch)
	defer func() {
		summary := k.Status(s, retErr)
		result, retErr = patch.Finalize(ctx, summary, result, retErr)
		switch {
		case patch.Released():
			d.forget(key)
		case patch.Concluded():
			if written {
				k.Written.remember(key, readRV, overlaid, obj, d.statusOf, patch.Checkpoints()...)
			}
			if k.Events != nil {
				k.Events(s, patch.Read().(T), obj, summary)
			}
		}
	}()
	if !obj.GetDeletionTimestamp().IsZero() {
		if k.Finalizer != "" && !controllerutil.ContainsFinalizer(obj, k.Finalizer) {
			// Released by an earlier reconcile, or by hand: the object may
			// be gone by the time a status write reaches it.
			patch.Release()
			return ctrl.Result{}, nil
		}
		return RunPhases(ctx, s, k.Deletion...)
	}
	if k.Finalizer != "" {
		if err := patch.EnsureFinalizer(ctx, k.Finalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	return RunPhases(ctx, s, k.Phases...)
}

// statusOf is obj's status in an otherwise empty object.
func (d *Driver[T, S]) statusOf(obj T) T {
	out := d.Kind.New()
	d.Kind.CopyStatus(out, obj)
	return out
}

func (d *Driver[T, S]) forget(key types.NamespacedName) {
	reportedUndecodable.forget(kindOf(d.Kind.New()), key)
	if d.Kind.Written != nil {
		d.Kind.Written.Forget(key)
	}
	for _, m := range d.Kind.Memory {
		m.Forget(key)
	}
}
