// Package serverside applies the objects reconcilers own with server-side
// apply, so fields other controllers or people own are left alone.
package serverside

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// createdAnnotation marks an object made by Create whose fields are not yet
// owned by an apply (see Create).
const createdAnnotation = "hyperfleet.io/created-before-apply"

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

// Create makes obj (TypeMeta set) as fieldOwner, and fails with
// AlreadyExists, changing nothing, if its name is taken. A create is the
// one write the API server refuses for an existing object, so it checks
// that the name is free without a read: a reconciler whose cache shows no
// object of the name creates first, and reads past the cache only when the
// create conflicts (someone else's object, or one of ours the cache does
// not show). An apply could not do this: it takes over whatever has the
// name, and an apply that names a UID, which would refuse an object of
// someone else's, refuses to create one too.
//
// A create's fields belong to an update entry, which a later apply does
// not release: a field that apply stops setting would stay. So the object
// carries createdAnnotation, whose value is the digest of what was
// created, until Update hands its fields to the apply's manager, on the
// first change.
func Create(ctx context.Context, c client.Client, fieldOwner string, obj client.Object) error {
	u, digest, err := content(obj)
	if err != nil {
		return err
	}
	created := &unstructured.Unstructured{Object: u}
	annotations := created.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[createdAnnotation] = digest
	created.SetAnnotations(annotations)
	if err := c.Create(ctx, created, client.FieldOwner(fieldOwner)); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(created.Object, obj)
}

// content is what Create or Apply sends for obj: the fields an apply of
// it sets, no more, and their digest.
func content(obj client.Object) (map[string]any, string, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, "", fmt.Errorf("converting %T: %w", obj, err)
	}
	delete(u, "status")
	pruneEmpty(u)
	data, err := json.Marshal(u) // map keys in order: the same content, the same bytes
	if err != nil {
		return nil, "", fmt.Errorf("encoding %T: %w", obj, err)
	}
	sum := sha256.Sum256(data)
	return u, hex.EncodeToString(sum[:8]), nil
}

// Update applies want over existing, an object of ours (from the cache).
// One made by Create whose content has changed since first has its fields
// handed from the create's entry to the apply's (reading it past the
// cache, as the cache holds no managedFields): once per object, on its
// first change, and only then, so a reconciler that applies on every look
// reads nothing while nothing changes. The apply then drops
// createdAnnotation, which it does not set. Until then the apply and the
// create's entry share the fields, which stay as created.
func Update(ctx context.Context, c client.Client, reader client.Reader, fieldOwner string, want, existing client.Object) error {
	if created, ok := existing.GetAnnotations()[createdAnnotation]; ok {
		_, digest, err := content(want)
		if err != nil {
			return err
		}
		if digest != created {
			if err := upgrade(ctx, c, reader, fieldOwner, existing); err != nil {
				return err
			}
		}
	}
	return Apply(ctx, c, fieldOwner, want)
}

func upgrade(ctx context.Context, c client.Client, reader client.Reader, fieldOwner string, existing client.Object) error {
	live, ok := existing.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("copying %T", existing)
	}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(existing), live); err != nil {
		return fmt.Errorf("reading %s to hand its fields to the apply: %w", existing.GetName(), err)
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(fieldOwner), fieldOwner)
	if err != nil || patch == nil {
		return err
	}
	// The patch tests the resourceVersion: a stale read fails, and the
	// next reconcile tries again.
	if err := c.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("handing the fields of %s to the apply: %w", existing.GetName(), err)
	}
	return nil
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
