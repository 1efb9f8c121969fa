package gitops_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// The generated files in the repository are what the generator makes now:
// a base edited without `make chart` fails here as well as in make verify.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := gitops.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s is stale or missing (%v): run make chart", name, err)
		}
	}
	err = filepath.WalkDir(filepath.Join(root, gitops.ChartDir), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if _, ok := files[filepath.ToSlash(rel)]; !ok {
			t.Errorf("%s is not generated: run make chart", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// render renders the chart with Helm's own engine, as `helm template` does,
// and returns its objects: the templates' and the CRDs'.
func render(t *testing.T, ch *chartv2.Chart, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	return renderOn(t, ch, namespace, values, nil)
}

// renderOn renders for a cluster with caps (nil: Helm's defaults, as
// `helm template` without --api-versions).
func renderOn(t *testing.T, ch *chartv2.Chart, namespace string, values map[string]any, caps *common.Capabilities) []*unstructured.Unstructured {
	t.Helper()
	objs, err := gitops.RenderChart(ch, namespace, values, caps)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// sameObjects compares a render with a kustomize build, which has the
// Namespace that Helm leaves to --create-namespace.
func sameObjects(t *testing.T, rendered, built []*unstructured.Unstructured) {
	t.Helper()
	var want []*unstructured.Unstructured
	for _, u := range built {
		if u.GetKind() != "Namespace" {
			want = append(want, u)
		}
	}
	got, wantByID := gitops.ByID(rendered), gitops.ByID(want)
	for id, g := range got {
		if w := wantByID[id]; w != nil {
			withoutReleaseLabels(t, g, w)
		}
	}
	if g, w := gitops.SortedIDs(rendered), gitops.SortedIDs(want); !slices.Equal(g, w) {
		t.Fatalf("the chart renders\n  %v\nthe base builds\n  %v", g, w)
	}
	for id, w := range wantByID {
		if !reflect.DeepEqual(got[id].Object, w.Object) {
			t.Errorf("%s differs between the chart and the base:\nchart: %v\nbase:  %v", id, got[id].Object, w.Object)
		}
	}
}

// The chart, rendered by Helm with its default values, makes exactly the
// base's objects; with monitoring.enabled, those of the base plus the
// monitoring component.
func TestChartRendersTheBase(t *testing.T) {
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Validate(); err != nil {
		t.Fatal(err)
	}
	base := built(t, gitops.BaseDir)
	sameObjects(t, render(t, ch, gitops.Namespace, nil), base)

	withMonitoring := built(t, gitops.BaseDir, gitops.MonitoringDir)
	sameObjects(t, render(t, ch, gitops.Namespace, map[string]any{"monitoring": map[string]any{"enabled": true}}), withMonitoring)
}

// Values reach the objects: namespace, image by digest, replicas,
// resources, log level.
func TestChartValues(t *testing.T) {
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	objs := render(t, ch, "fleet", map[string]any{
		"image":     map[string]any{"digest": digest, "pullPolicy": "Always"},
		"replicas":  3,
		"logLevel":  "debug",
		"resources": map[string]any{"requests": map[string]any{"cpu": "2", "memory": "1Gi"}},
	})
	dep, c := managerContainer(t, objs)
	if *dep.Spec.Replicas != 3 {
		t.Errorf("replicas = %d", *dep.Spec.Replicas)
	}
	if want := image + "@" + digest; c.Image != want || c.ImagePullPolicy != "Always" {
		t.Errorf("image %s (%s), want %s (Always)", c.Image, c.ImagePullPolicy, want)
	}
	if !slices.Contains(c.Args, "--log-level=debug") {
		t.Errorf("args %v", c.Args)
	}
	// Helm merges given values into the defaults: the limits stay.
	if c.Resources.Requests.Cpu().String() != "2" || c.Resources.Requests.Memory().String() != "1Gi" || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %v", c.Resources)
	}
	for _, u := range objs {
		if u.GetNamespace() != "" && u.GetNamespace() != "fleet" {
			t.Errorf("%s is in %s, not the release's namespace", gitops.ID(u), u.GetNamespace())
		}
		subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
		for _, s := range subjects {
			if ns := s.(map[string]any)["namespace"]; ns != "fleet" {
				t.Errorf("%s binds a subject in %v", gitops.ID(u), ns)
			}
		}
	}
	// By tag, the chart's appVersion unless given.
	_, c = managerContainer(t, render(t, ch, "fleet", nil))
	if want := image + ":" + ch.Metadata.AppVersion; c.Image != want {
		t.Errorf("image %s, want %s", c.Image, want)
	}
}

// withoutReleaseLabels removes from a rendered template the labels the chart
// adds to the base's (Helm's standard labels), after checking they are there.
func withoutReleaseLabels(t *testing.T, rendered, built *unstructured.Unstructured) {
	t.Helper()
	if rendered.GetKind() == "CustomResourceDefinition" {
		return // crds/ is copied, not templated, by Helm
	}
	labels := rendered.GetLabels()
	for _, k := range []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "app.kubernetes.io/name"} {
		if labels[k] == "" {
			t.Errorf("%s lacks the label %s", gitops.ID(rendered), k)
		}
		if _, inBase := built.GetLabels()[k]; !inBase {
			delete(labels, k)
		}
	}
	if len(labels) == 0 {
		unstructured.RemoveNestedField(rendered.Object, "metadata", "labels")
		return
	}
	rendered.SetLabels(labels)
}
