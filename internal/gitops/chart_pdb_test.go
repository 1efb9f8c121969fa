package gitops_test

import (
	"path/filepath"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"

	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// podDisruptionBudget.enabled (off by default: the base runs one replica)
// renders prod's budget, selecting the manager's Pods, with minAvailable
// from the values.
func TestChartPodDisruptionBudget(t *testing.T) {
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	if gitops.Find(render(t, ch, "fleet", nil), "PodDisruptionBudget", gitops.ManagerName) != nil {
		t.Fatal("a PodDisruptionBudget by default")
	}
	objs := render(t, ch, "fleet", map[string]any{"replicas": 3, "podDisruptionBudget": map[string]any{"enabled": true, "minAvailable": 2}})
	u := gitops.Find(objs, "PodDisruptionBudget", gitops.ManagerName)
	if u == nil {
		t.Fatal("no PodDisruptionBudget when enabled")
	}
	pdb := decode[policyv1.PodDisruptionBudget](t, u)
	if pdb.Namespace != "fleet" || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("PodDisruptionBudget %s/%s minAvailable %v, want fleet and 2", pdb.Namespace, pdb.Name, pdb.Spec.MinAvailable)
	}
	dep, _ := managerContainer(t, objs)
	if !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("the budget selects %v; the manager's Pods are %v", pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels)
	}
}
