package kubevirtsim

import (
	"context"
	"encoding/json"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// updateFinalizers applies change to obj's finalizers and writes them if they
// changed. Like KubeVirt, it guards the write with a JSON patch test of the
// current list rather than of the resourceVersion: the frequent status
// writes then do not make it conflict, while a concurrent change to the
// finalizers still does (reported as a conflict).
func updateFinalizers(ctx context.Context, c client.Client, obj client.Object, change func(client.Object)) error {
	have := slices.Clone(obj.GetFinalizers())
	base, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return nil // every API object is a client.Object
	}
	change(obj)
	want := obj.GetFinalizers()
	if slices.Equal(have, want) {
		return nil
	}
	if len(have) == 0 {
		// There is no list to test; fall back to the resourceVersion.
		return c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	if want == nil {
		want = []string{}
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": have},
		{"op": "replace", "path": "/metadata/finalizers", "value": want},
	})
	if err != nil {
		return err
	}
	err = c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch))
	if apierrors.IsInvalid(err) {
		// A failed test: someone changed the finalizers meanwhile.
		gvk := obj.GetObjectKind().GroupVersionKind()
		return apierrors.NewConflict(gvk.GroupVersion().WithResource(gvk.Kind).GroupResource(), obj.GetName(), err)
	}
	return err
}
