package conditions

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PatchStatus writes obj's status as a merge patch against before, and writes
// nothing when nothing changed (no churn, no resourceVersion bump). A
// conflict is left to the caller's requeue: merge patches carry no
// resourceVersion, so they only fail if the object is gone.
func PatchStatus(ctx context.Context, c client.Client, before, obj client.Object) error {
	patch := client.MergeFrom(before)
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	if string(data) == "{}" {
		return nil
	}
	return client.IgnoreNotFound(c.Status().Patch(ctx, obj, patch))
}
