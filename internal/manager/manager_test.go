package manager

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// The cache selects Pods, Services, Deployments and ConfigMaps by the
// managed-by label, in the namespaces the operator watches, and Secrets by
// the credentials label in the operator's namespace. (The performer and
// executor suites show the cache built from these rules at work.)
func TestCacheOptions(t *testing.T) {
	o, err := CacheOptions(Options{OperatorNamespace: "hyperfleet-system", Namespaces: []string{"team-a"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.DefaultNamespaces["team-a"]; !ok || len(o.DefaultNamespaces) != 1 {
		t.Errorf("DefaultNamespaces = %v, want team-a alone", o.DefaultNamespaces)
	}
	ours := labels.Set{meta.ManagedByLabel: meta.ManagedByValue}
	theirs := labels.Set{meta.ManagedByLabel: "helm", "app": "other"}
	found := map[string]bool{}
	for obj, by := range o.ByObject {
		var kind string
		switch obj.(type) {
		case *corev1.Pod:
			kind = "Pod"
		case *corev1.Service:
			kind = "Service"
		case *corev1.ConfigMap:
			kind = "ConfigMap"
		case *appsv1.Deployment:
			kind = "Deployment"
		case *networkingv1.NetworkPolicy:
			kind = "NetworkPolicy"
		case *corev1.Secret:
			found["Secret"] = true
			if !by.Label.Matches(labels.Set{meta.CredentialsLabel: "true"}) || by.Label.Matches(ours) {
				t.Errorf("Secret selector = %s, want the credentials label", by.Label)
			}
			if _, ok := by.Namespaces["hyperfleet-system"]; !ok || len(by.Namespaces) != 1 {
				t.Errorf("Secret namespaces = %v, want the operator's alone", by.Namespaces)
			}
			continue
		default:
			t.Errorf("unexpected ByObject entry %T", obj)
			continue
		}
		found[kind] = true
		if by.Label == nil || !by.Label.Matches(ours) || by.Label.Matches(theirs) || by.Label.Matches(labels.Set{}) {
			t.Errorf("%s selector = %v, want %s=%s", kind, by.Label, meta.ManagedByLabel, meta.ManagedByValue)
		}
		if by.Namespaces != nil {
			t.Errorf("%s namespaces = %v, want the default (the watched namespaces)", kind, by.Namespaces)
		}
	}
	for _, kind := range []string{"Pod", "Service", "ConfigMap", "Deployment", "NetworkPolicy", "Secret"} {
		if !found[kind] {
			t.Errorf("no cache rule for %s", kind)
		}
	}
}
