package gitops

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ComponentsDir holds the optional parts an overlay may list.
const ComponentsDir = "kustomize/components"

// treeDirs are the folders a kustomize build of an overlay reads.
var treeDirs = []string{"kustomize", "overlays", "alerts", "dashboards"}

// Components returns every component's folder, relative to root: a folder
// with a kustomization.yaml, or else the components in its subfolders (the
// external-secrets components, one per feature).
func Components(root string) ([]string, error) {
	var out []string
	var walk func(dir string) error
	walk = func(dir string) error {
		if _, err := os.Stat(filepath.Join(root, dir, "kustomization.yaml")); err == nil {
			out = append(out, dir)
			return nil
		}
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.IsDir() {
				if err := walk(path.Join(dir, e.Name())); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(ComponentsDir); err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

// BuildOverlayWith builds overlays/<env> with the components added to the
// overlay's own list, as a user enabling them there would: unlike BuildWith,
// the overlay's patches then run after the components, so a patch that
// replaces what a component set shows.
func BuildOverlayWith(root, env string, components ...string) ([]*unstructured.Unstructured, error) {
	tmp, err := os.MkdirTemp("", "hyperfleet-overlay-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	for _, d := range treeDirs {
		if err := os.CopyFS(filepath.Join(tmp, d), os.DirFS(filepath.Join(root, d))); err != nil {
			return nil, fmt.Errorf("copying %s: %w", d, err)
		}
	}
	file := filepath.Join(tmp, "overlays", env, "kustomization.yaml")
	data, err := os.ReadFile(file) //nolint:gosec // a copy of the repository's own overlay, in a folder made here
	if err != nil {
		return nil, err
	}
	k := map[string]any{}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("overlays/%s: %w", env, err)
	}
	var listed []string
	if cs, ok := k["components"].([]any); ok {
		for _, c := range cs {
			if s, ok := c.(string); ok {
				listed = append(listed, path.Clean(path.Join("overlays", env, s)))
			}
		}
	}
	comps, _ := k["components"].([]any)
	for _, c := range components {
		if !slices.Contains(listed, path.Clean(c)) {
			comps = append(comps, path.Join("../..", c))
		}
	}
	k["components"] = comps
	if data, err = yaml.Marshal(k); err != nil {
		return nil, err
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, err
	}
	return build(filepath.Dir(file))
}
