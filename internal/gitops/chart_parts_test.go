package gitops_test

import (
	"path/filepath"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// Each optional part has its toggle: turned on alone, the chart renders the
// base plus exactly what the component adds (objects and manager flags);
// its own values (the store, the host) reach the objects.
func TestChartToggles(t *testing.T) {
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]any{"enabled": true}
	toggles := map[string]map[string]any{
		gitops.WebhookIngressDir: {"webhookIngress": on},
		gitops.HourglassOnlyDir:  {"hourglassOnly": on},
	}
	for _, f := range gitops.ExternalSecretsFeatures {
		toggles["kustomize/components/external-secrets/"+f] = map[string]any{"externalSecrets": map[string]any{f: on}}
	}
	for dir, values := range toggles {
		t.Run(dir, func(t *testing.T) {
			sameObjects(t, render(t, ch, gitops.Namespace, values), built(t, gitops.BaseDir, dir))
		})
	}

	objs := render(t, ch, gitops.Namespace, map[string]any{
		"webhookIngress":  map[string]any{"enabled": true, "host": "hooks.example.org"},
		"externalSecrets": map[string]any{"store": "vault", "proxmox": on},
	})
	es := gitops.Find(objs, "ExternalSecret", "proxmox-credentials")
	if store := es.Object["spec"].(map[string]any)["secretStoreRef"].(map[string]any)["name"]; store != "vault" {
		t.Errorf("ExternalSecret store %v, want vault", store)
	}
	ing := gitops.Find(objs, "Ingress", "hyperfleet-webhook")
	rules := ing.Object["spec"].(map[string]any)["rules"].([]any)
	tls := ing.Object["spec"].(map[string]any)["tls"].([]any)
	if rules[0].(map[string]any)["host"] != "hooks.example.org" || tls[0].(map[string]any)["hosts"].([]any)[0] != "hooks.example.org" {
		t.Errorf("Ingress rules %v, tls %v: want host hooks.example.org", rules, tls)
	}
}
