package performer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The original operator's example Performers (testdata/original, verbatim)
// apply unchanged: the API server takes each server-side (which refuses a
// field the schema does not declare), and what it stored is what was sent,
// no field pruned.
func TestOriginalExamplesApply(t *testing.T) {
	e := newEnv(t)
	files, err := filepath.Glob("testdata/original/*.yaml")
	if err != nil || len(files) != 5 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			sent := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(data, &sent.Object); err != nil {
				t.Fatal(err)
			}
			sent.SetNamespace(e.ns)
			applied := sent.DeepCopy()
			if err := e.c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(applied),
				client.FieldOwner("original-example"), client.ForceOwnership); err != nil {
				t.Fatalf("applying %s: %v", file, err)
			}
			stored := &unstructured.Unstructured{}
			stored.SetGroupVersionKind(sent.GroupVersionKind())
			if err := e.get(sent.GetName(), stored); err != nil {
				t.Fatal(err)
			}
			if missing := notKept(sent.Object["spec"], stored.Object["spec"], "spec"); len(missing) > 0 {
				t.Errorf("the API server did not keep %v", missing)
			}
		})
	}
}

// notKept lists the paths of sent whose values stored does not hold. A
// field the server added (a default) is not a difference; one it pruned or
// changed is.
func notKept(sent, stored any, path string) []string {
	switch s := sent.(type) {
	case map[string]any:
		st, ok := stored.(map[string]any)
		if !ok {
			return []string{path}
		}
		var out []string
		for k, v := range s {
			out = append(out, notKept(v, st[k], path+"."+k)...)
		}
		return out
	case []any:
		st, ok := stored.([]any)
		if !ok || len(st) != len(s) {
			return []string{path}
		}
		var out []string
		for i := range s {
			out = append(out, notKept(s[i], st[i], path+"[]")...)
		}
		return out
	default:
		if !equality.Semantic.DeepEqual(normalize(sent), normalize(stored)) {
			return []string{path}
		}
		return nil
	}
}

// normalize makes JSON numbers comparable whether they came from YAML
// (int64) or the API server's JSON (int64 or float64).
func normalize(v any) any {
	switch n := v.(type) {
	case int:
		return float64(n)
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return v
}
