// Package manifests decodes multi-document YAML into objects and applies them
// with server-side apply, for the sandbox and the tests of shipped manifests.
package manifests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Decode splits YAML documents into objects, skipping empty documents. source
// names the input in errors.
func Decode(source string, data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading document %d: %w", source, i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("%s: decoding document %d: %w", source, i, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" {
			return nil, fmt.Errorf("%s: document %d has no apiVersion or kind", source, i)
		}
		objs = append(objs, obj)
	}
}

// Apply server-side-applies objs in order, into namespace where an object
// names none, as fieldOwner.
func Apply(ctx context.Context, c client.Client, namespace, fieldOwner string, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		obj = obj.DeepCopy()
		if obj.GetNamespace() == "" && namespace != "" && namespaced(obj) {
			obj.SetNamespace(namespace)
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}

// namespaced reports whether a kind from our samples is namespaced. The
// samples hold only namespaced kinds besides Namespace itself.
func namespaced(obj *unstructured.Unstructured) bool {
	return obj.GetKind() != "Namespace"
}
