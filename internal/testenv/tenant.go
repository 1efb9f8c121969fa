package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/kustomize/rbac"
)

// TenantGroup is the group every tenant user of the tests belongs to.
const TenantGroup = "hyperfleet:tenants"

var (
	tenantRolesOnce sync.Once
	// tenantRolesErr is kept for every later caller: a failed install must
	// fail each test that needs the roles, not only the first.
	tenantRolesErr error
)

// TenantUser is the name of the tenant user of namespace ns.
func TenantUser(ns string) string { return "tenant:" + ns }

// Tenant returns a client that acts as a tenant really is (docs/security.md):
// the user TenantUser(ns), through impersonation on the real API server,
// holding only the shipped hyperfleet-tenant ClusterRole and the Secrets of
// ns, both bound in ns — plus extra, a Role of further rules in ns (a team
// that also holds, say, the right to create Pods).
func Tenant(t testing.TB, ns string, extra ...rbacv1.PolicyRule) client.Client {
	t.Helper()
	ctx := context.Background()
	tenantRolesOnce.Do(func() {
		roles, err := rbac.TenantRoles()
		if err != nil {
			tenantRolesErr = err
			return
		}
		for _, r := range roles {
			if err := k8sClient.Create(ctx, r); err != nil && !apierrors.IsAlreadyExists(err) {
				tenantRolesErr = fmt.Errorf("creating ClusterRole %s: %w", r.Name, err)
				return
			}
		}
	})
	if tenantRolesErr != nil {
		t.Fatal(tenantRolesErr)
	}
	user := TenantUser(ns)
	rules := append([]rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
	}}, extra...)
	objs := []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}, Rules: rules},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "hyperfleet-tenant", Namespace: ns},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "hyperfleet-tenant"},
		},
	}
	for _, o := range objs {
		if err := k8sClient.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("granting the tenant of %s: %v", ns, err)
		}
	}
	cfg := Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{TenantGroup, "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: k8sScheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
