// Package gitops builds HyperFleet's delivery manifests — the Kustomize base,
// its components and overlays — and generates what is derived from them: the
// Helm chart (charts/hyperfleet) and Argo CD's health checks
// (argocd/argocd-cm-patch.yaml). hack/chartgen writes them (make chart); the
// package's tests check every manifest against a real API server.
package gitops

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Paths inside the repository.
const (
	BaseDir       = "kustomize"
	CRDDir        = "kustomize/crd"
	MonitoringDir = "kustomize/components/monitoring"
	NamespacedDir = "kustomize/components/namespaced"
	// HourglassOnlyDir runs the Hourglass build's reconcilers alone.
	HourglassOnlyDir = "kustomize/components/hourglass-only"
	ChartDir         = "charts/hyperfleet"
	HealthScript     = "argocd/health.lua"
	ArgoCDPatch      = "argocd/argocd-cm-patch.yaml"
)

// Overlays are the environments under overlays/.
var Overlays = []string{"dev", "staging", "prod"}

// Build runs `kustomize build` on dir (relative to root) and returns the
// objects in kustomize's output order.
func Build(root, dir string) ([]*unstructured.Unstructured, error) {
	return build(filepath.Join(root, dir))
}

// BuildWith builds dir with extra components, as an overlay that adds only
// them would.
func BuildWith(root, dir string, components ...string) ([]*unstructured.Unstructured, error) {
	tmp, err := os.MkdirTemp("", "hyperfleet-kustomize-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{rel(tmp, root, dir)},
	}
	var comps []string
	for _, c := range components {
		comps = append(comps, rel(tmp, root, c))
	}
	if len(comps) > 0 {
		k["components"] = comps
	}
	data, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), data, 0o600); err != nil {
		return nil, err
	}
	return build(tmp)
}

// rel is dir relative to from: kustomize refuses absolute paths.
func rel(from, root, dir string) string {
	p, err := filepath.Abs(filepath.Join(root, dir))
	if err != nil {
		return dir
	}
	r, err := filepath.Rel(from, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// clusterScopedUnknownToKustomize are cluster-scoped kinds newer than
// kustomize's built-in schema, which gives them the base's namespace. The API
// server drops it; the chart and the checks here leave it out.
var clusterScopedUnknownToKustomize = map[string]bool{
	"MutatingAdmissionPolicy.admissionregistration.k8s.io":        true,
	"MutatingAdmissionPolicyBinding.admissionregistration.k8s.io": true,
}

func build(path string) ([]*unstructured.Unstructured, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), path)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", path, err)
	}
	out := make([]*unstructured.Unstructured, 0, res.Size())
	for _, r := range res.Resources() {
		// Through JSON, so numbers are int64 as in objects read from the API.
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", path, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", path, r.CurId(), err)
		}
		if clusterScopedUnknownToKustomize[u.GroupVersionKind().GroupKind().String()] {
			u.SetNamespace("")
		}
		out = append(out, u)
	}
	return out, nil
}

// ID names an object uniquely within a build: group/kind/namespace/name.
func ID(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s/%s/%s", u.GroupVersionKind().Group, u.GetKind(), u.GetNamespace(), u.GetName())
}

// Find returns the object of kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// ByID indexes objs by ID.
func ByID(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := make(map[string]*unstructured.Unstructured, len(objs))
	for _, u := range objs {
		m[ID(u)] = u
	}
	return m
}

// SortedIDs returns the IDs of objs, sorted.
func SortedIDs(objs []*unstructured.Unstructured) []string {
	ids := make([]string, 0, len(objs))
	for _, u := range objs {
		ids = append(ids, ID(u))
	}
	sort.Strings(ids)
	return ids
}
