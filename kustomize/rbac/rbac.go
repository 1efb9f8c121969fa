// Package rbac embeds the tenant ClusterRoles kustomize/rbac ships, so the
// tests that act as a tenant hold exactly the rights a cluster grants one.
package rbac

import (
	"bytes"
	_ "embed"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

//go:embed tenant_role.yaml
var tenantRoles []byte

// TenantRoles returns hyperfleet-tenant and hyperfleet-tenant-view.
func TenantRoles() ([]*rbacv1.ClusterRole, error) {
	var out []*rbacv1.ClusterRole
	for i, doc := range bytes.Split(tenantRoles, []byte("\n---\n")) {
		role := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict(doc, role); err != nil {
			return nil, fmt.Errorf("tenant_role.yaml document %d: %w", i, err)
		}
		out = append(out, role)
	}
	return out, nil
}
