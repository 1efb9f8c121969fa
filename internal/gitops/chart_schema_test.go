package gitops_test

import (
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// Helm checks values against the chart's schema before rendering: a
// misspelt key or a wrong type is refused, naming it; the defaults and the
// values a platform engineer sets pass (every render in these tests goes
// through the schema).
func TestChartValuesSchema(t *testing.T) {
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Schema == nil {
		t.Fatal("the chart has no values.schema.json")
	}
	for _, tc := range []struct {
		values map[string]any
		names  string
	}{
		{map[string]any{"replica": 2}, "replica"},
		{map[string]any{"replicas": "two"}, "replicas"},
		{map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "pullPolicy"},
		{map[string]any{"extraArgs": []any{"log-level=debug"}}, "extraArgs"},
		{map[string]any{"monitoring": map[string]any{"enable": true}}, "enable"},
	} {
		_, err := util.ToRenderValues(ch, tc.values, common.ReleaseOptions{Name: "hyperfleet", Namespace: "fleet", IsInstall: true}, nil)
		if err == nil || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("values %v: error %v, want one naming %s", tc.values, err, tc.names)
		}
	}
}
