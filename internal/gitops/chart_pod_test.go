package gitops_test

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	corev1 "k8s.io/api/core/v1"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// The manager Pod's scheduling, pull secrets, annotations and extra flags
// reach the Deployment from values; the base's annotation stays, and an
// extra flag parses as `hyperfleet run` parses it, after the base's.
func TestChartPodValues(t *testing.T) {
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, ch, "fleet", map[string]any{
		"nodeSelector":              map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":               []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}},
		"affinity":                  map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "ops", "operator": "Exists"}}}}}}},
		"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}},
		"imagePullSecrets":          []any{map[string]any{"name": "ghcr"}},
		"podAnnotations":            map[string]any{"example.com/team": "ops"},
		"extraArgs":                 []any{"--log-level=debug"},
	})
	dep, c := managerContainer(t, objs)
	spec := dep.Spec.Template.Spec
	if spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "dedicated" || spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("tolerations %v", spec.Tolerations)
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
		t.Errorf("affinity %v", spec.Affinity)
	}
	if len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("topologySpreadConstraints %v", spec.TopologySpreadConstraints)
	}
	if !reflect.DeepEqual(spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "ghcr"}}) {
		t.Errorf("imagePullSecrets %v", spec.ImagePullSecrets)
	}
	a := dep.Spec.Template.Annotations
	if a["example.com/team"] != "ops" || a["kubectl.kubernetes.io/default-container"] != "manager" {
		t.Errorf("Pod annotations %v", a)
	}
	if c.Args[len(c.Args)-1] != "--log-level=debug" || !slices.ContainsFunc(c.Args[:len(c.Args)-1], func(s string) bool { return strings.HasPrefix(s, "--log-level=") }) {
		t.Errorf("args %v: want the extra flag last, after the base's", c.Args)
	}
	if opts := parseRunFlags(t, c.Args); !opts.LeaderElect {
		t.Error("the base's flags were lost")
	}
}

// helm install prints the notes, naming the release's namespace and how to
// upgrade the CRDs.
func TestChartNotes(t *testing.T) {
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	notes := renderFile(t, ch, "fleet", "templates/NOTES.txt")
	for _, want := range []string{"-n fleet rollout status deploy/hyperfleet-manager", "kubectl apply --server-side -f charts/hyperfleet/crds"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, notes)
		}
	}
}

// renderFile renders the chart and returns one file of it, by its path in
// the chart.
func renderFile(t *testing.T, ch *chartv2.Chart, namespace, name string) string {
	t.Helper()
	vals, err := util.ToRenderValues(ch, nil, common.ReleaseOptions{Name: "hyperfleet", Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := out[ch.Name()+"/"+name]
	if !ok {
		t.Fatalf("the chart renders no %s", name)
	}
	return f
}
