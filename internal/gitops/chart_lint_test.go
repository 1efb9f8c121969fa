package gitops_test

import (
	"path/filepath"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// chartToggles are the chart's values that change what it renders, each
// turned on (or off, for a default that is on) alone, then all at once. Each
// call makes new maps: Helm merges the defaults into the values it is given.
func chartToggles() map[string]map[string]any {
	on := func() map[string]any { return map[string]any{"enabled": true} }
	toggles := map[string]map[string]any{
		"default":                     nil,
		"monitoring":                  {"monitoring": on()},
		"webhookIngress":              {"webhookIngress": map[string]any{"enabled": true, "host": "hooks.example.org"}},
		"podDisruptionBudget":         {"replicas": 2, "podDisruptionBudget": map[string]any{"enabled": true, "minAvailable": 1}},
		"machineClaimFinalizerPolicy": {"machineClaimFinalizerPolicy": map[string]any{"enabled": false}},
		"extraArgs":                   {"extraArgs": []any{"--log-level=debug"}},
		"hourglassOnly":               {"hourglassOnly": on()},
		"image.digest":                {"image": map[string]any{"digest": "sha256:" + hex64}},
		"pod": {
			"nodeSelector":              map[string]any{"kubernetes.io/os": "linux"},
			"tolerations":               []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}},
			"imagePullSecrets":          []any{map[string]any{"name": "ghcr"}},
			"podAnnotations":            map[string]any{"example.org/owner": "platform"},
			"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}},
		},
	}
	all := map[string]any{"monitoring": on(), "webhookIngress": on(), "replicas": 2, "podDisruptionBudget": on()}
	es := map[string]any{"store": "vault"}
	for _, f := range gitops.ExternalSecretsFeatures {
		toggles["externalSecrets."+f] = map[string]any{"externalSecrets": map[string]any{f: on()}}
		es[f] = on()
	}
	all["externalSecrets"] = es
	toggles["all"] = all
	return toggles
}

const hex64 = "abababababababababababababababababababababababababababababababab"

// helm lint, with Helm's own lint rules (the chart file, the values against
// values.schema.json, every template rendered and checked as YAML, the
// CRDs), finds no error and no warning for the default values and for each
// toggle (INFO messages, such as the icon Chart.yaml lacks, are logged). Helm's
// linter renders for its default capabilities, so the MachineClaim
// finalizer policy (rendered only where the cluster serves the API) is
// linted by its template's syntax there; TestChartFinalizerPolicyToggle
// renders it.
func TestChartLint(t *testing.T) {
	dir := filepath.Join(root, gitops.ChartDir)
	for name, values := range chartToggles() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res := lint.RunAll(dir, values, gitops.Namespace)
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %v", m)
				} else {
					t.Logf("helm lint: %v", m)
				}
			}
		})
	}
}
