package gitops_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// The credentials come one feature at a time: each external-secrets
// component, alone on the base, syncs exactly its feature's Secrets, so an
// installation using only Proxmox waits on no GitHub, Supabase or Hourglass
// key; and only the Supabase one points the manager at Supabase.
func TestExternalSecretsPerFeature(t *testing.T) {
	features := map[string][]string{
		"proxmox":   {"proxmox-credentials"},
		"github":    {"github-app-credentials", "github-webhook-secret"},
		"supabase":  {"supabase-credentials"},
		"hourglass": {"hourglass-operator-keys"},
	}
	var all []string
	for feature, want := range features {
		all = append(all, want...)
		t.Run(feature, func(t *testing.T) {
			objs := built(t, gitops.BaseDir, "kustomize/components/external-secrets/"+feature)
			var got []string
			for _, u := range objs {
				if u.GetKind() == "ExternalSecret" {
					got = append(got, u.GetName())
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("ExternalSecrets %v, want %v", got, want)
			}
			_, c := managerContainer(t, objs)
			supabase := slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--cyberdesk-supabase-secret=") })
			if supabase != (feature == "supabase") {
				t.Errorf("args %v: --cyberdesk-supabase-secret only with the supabase component", c.Args)
			}
		})
	}
	// Every Secret the overlays sync belongs to one feature.
	for name := range credentials {
		if !slices.Contains(all, name) {
			t.Errorf("Secret %s belongs to no external-secrets component", name)
		}
	}
}
