package gitops_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// Deleting a CRD deletes every object of its kind: no tool that installs
// HyperFleet deletes one (or the operator's Namespace) when the installation
// is removed or the CRD leaves the source. Argo CD neither prunes nor deletes it, Flux does not prune
// it, Helm keeps it — in the base, every overlay and the chart's crds/.
func TestCRDsAreNeverDeletedByTheTools(t *testing.T) {
	want := map[string]string{
		"kustomize.toolkit.fluxcd.io/prune": "disabled",
		"helm.sh/resource-policy":           "keep",
	}
	check := func(where, name string, annotations map[string]string) {
		t.Helper()
		opts := strings.Split(annotations["argocd.argoproj.io/sync-options"], ",")
		for i := range opts {
			opts[i] = strings.TrimSpace(opts[i])
		}
		for _, o := range []string{"Prune=false", "Delete=false", "ServerSideApply=true"} {
			if !slices.Contains(opts, o) {
				t.Errorf("%s: CRD %s: argocd.argoproj.io/sync-options %v lacks %s", where, name, opts, o)
			}
		}
		for k, v := range want {
			if annotations[k] != v {
				t.Errorf("%s: CRD %s: %s = %q, want %q", where, name, k, annotations[k], v)
			}
		}
	}
	for _, dir := range append([]string{gitops.BaseDir}, overlayDirs()...) {
		n := 0
		for _, u := range built(t, dir) {
			switch u.GetKind() {
			case "CustomResourceDefinition":
				n++
				check(dir, u.GetName(), u.GetAnnotations())
			case "Namespace":
				checkNamespaceKept(t, dir, u.GetAnnotations())
			}
		}
		if n == 0 {
			t.Errorf("%s has no CRDs", dir)
		}
	}
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range render(t, ch, gitops.Namespace, nil) {
		if u.GetKind() == "CustomResourceDefinition" {
			check("the chart", u.GetName(), u.GetAnnotations())
		}
	}
}

// The operator's Namespace is kept by Argo CD and Flux too (the chart has
// none): it may hold users' HypervisorClusters and credentials, which the
// namespace controller would delete with no operator left to release them,
// and its UID is the installation id every machine carries. docs/uninstall.md
// deletes it last, on purpose; internal/uninstall runs that.
func checkNamespaceKept(t *testing.T, where string, annotations map[string]string) {
	t.Helper()
	opts := strings.Split(annotations["argocd.argoproj.io/sync-options"], ",")
	for i := range opts {
		opts[i] = strings.TrimSpace(opts[i])
	}
	for _, o := range []string{"Prune=false", "Delete=false"} {
		if !slices.Contains(opts, o) {
			t.Errorf("%s: the Namespace's argocd.argoproj.io/sync-options %v lack %s", where, opts, o)
		}
	}
	if got := annotations["kustomize.toolkit.fluxcd.io/prune"]; got != "disabled" {
		t.Errorf("%s: the Namespace's kustomize.toolkit.fluxcd.io/prune = %q, want disabled", where, got)
	}
}

func overlayDirs() []string {
	var dirs []string
	for _, env := range gitops.Overlays {
		dirs = append(dirs, "overlays/"+env)
	}
	return dirs
}
