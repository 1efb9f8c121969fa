package skeleton

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// EnsureFinalizer adds finalizer to the object (a merge patch: no conflict
// with a concurrent status write) and rebases the status patch on the
// result, so the final status write carries only status.
func (p *StatusPatch) EnsureFinalizer(ctx context.Context, finalizer string) error {
	if controllerutil.ContainsFinalizer(p.obj, finalizer) {
		return nil
	}
	patch := client.MergeFrom(p.obj.DeepCopyObject().(Object))
	controllerutil.AddFinalizer(p.obj, finalizer)
	if err := p.client.Patch(ctx, p.obj, patch); err != nil {
		return err
	}
	p.Rebase()
	return nil
}

// ReleaseFinalizer removes finalizer, letting the object go, and tells
// Finalize to write nothing: the object may be gone by then. A finalizer
// already gone, or an object already gone, is success.
func (p *StatusPatch) ReleaseFinalizer(ctx context.Context, finalizer string) error {
	p.Release()
	if !controllerutil.ContainsFinalizer(p.obj, finalizer) {
		return nil
	}
	patch := client.MergeFrom(p.obj.DeepCopyObject().(Object))
	controllerutil.RemoveFinalizer(p.obj, finalizer)
	if err := p.client.Patch(ctx, p.obj, patch); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// DeletionDeadline is when a finalizer stops waiting for the outside world:
// timeout after deletion was requested. Check it before anything that can
// fail, so a persistent error never pins the object beyond it.
func DeletionDeadline(obj client.Object, timeout time.Duration) time.Time {
	return obj.GetDeletionTimestamp().Add(timeout)
}
