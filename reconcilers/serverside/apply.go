// Package serverside applies the objects reconcilers own with server-side
// apply, so fields other controllers or people own are left alone.
package serverside

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply server-side-applies obj (TypeMeta set) as fieldOwner and reads the
// result back into obj. Server-side apply leaves the fields others own
// (defaults, a mesh's annotations) alone and removes the fields we stop
// setting.
func Apply(ctx context.Context, c client.Client, fieldOwner string, obj client.Object) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("converting %T for apply: %w", obj, err)
	}
	delete(u, "status")
	// A typed object renders its unset structs as {} and its unset times as
	// null; applied, those would claim fields we do not mean to set.
	pruneEmpty(u)
	applied := &unstructured.Unstructured{Object: u}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(applied),
		client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return err
	}
	// Leave the server's answer (status, defaults, generation) in obj.
	return runtime.DefaultUnstructuredConverter.FromUnstructured(applied.Object, obj)
}

// pruneEmpty drops nulls, empty maps and empty lists, recursively.
func pruneEmpty(m map[string]any) {
	for k, v := range m {
		if isEmpty(prune(v)) {
			delete(m, k)
		}
	}
}

func prune(v any) any {
	switch t := v.(type) {
	case map[string]any:
		pruneEmpty(t)
	case []any:
		for _, item := range t {
			prune(item)
		}
	}
	return v
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}
