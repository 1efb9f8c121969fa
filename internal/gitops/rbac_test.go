package gitops_test

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

type access struct {
	verb, group, resource, namespace string
	name                             string // one object's, when the rule may depend on it
	path                             string // a non-resource URL instead
	allowed                          bool
}

// checkAccess asks the API server's authorizer, as a SubjectAccessReview,
// whether the ServiceAccount sa of the operator's namespace may do a.
func checkAccess(ctx context.Context, t *testing.T, sa string, a access) {
	t.Helper()
	ns := gitops.Namespace
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + ns + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}}
	what := a.path
	if a.path != "" {
		sar.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Verb: a.verb, Path: a.path}
	} else {
		sar.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace, Name: a.name,
		}
		what = a.resource + "." + a.group + " " + a.name + " in " + a.namespace
		if a.namespace == "" {
			what = a.resource + "." + a.group + " cluster-wide"
		}
	}
	ask := func() *authorizationv1.SubjectAccessReview {
		review := sar.DeepCopy()
		if err := testenv.Client().Create(ctx, review); err != nil {
			t.Fatal(err)
		}
		return review
	}
	got := ask()
	// The authorizer reads RBAC from its own informers: a grant applied a
	// moment ago may not be in them yet, so an allowed answer is waited
	// for (a short while). A denial is asked once, after the grants that
	// precede it show, so a lagging grant cannot pass for a denial.
	for deadline := time.Now().Add(15 * time.Second); a.allowed && !got.Status.Allowed && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		got = ask()
	}
	if got.Status.Allowed != a.allowed {
		t.Errorf("%s may %s %s: %v, want %v (%s)", sa, a.verb, what, got.Status.Allowed, a.allowed, got.Status.Reason)
	}
}

// The RBAC of the base and the monitoring component, applied to a real API
// server, grants the manager what it needs and not more, and the scraper
// /metrics only — asked of the API server's authorizer as SubjectAccessReviews.
func TestRBACGrantsWhatIsNeeded(t *testing.T) {
	ctx := context.Background()
	c := testenv.Client()
	objs := built(t, gitops.BaseDir, gitops.MonitoringDir)
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			ns := &corev1.Namespace{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ns); err != nil {
				t.Fatal(err)
			}
			createNamespace(t, ns)
		}
	}
	for _, u := range objs {
		switch u.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := apply(ctx, c, u.DeepCopy(), false); err != nil {
				t.Fatalf("%s: %v", gitops.ID(u), err)
			}
		}
	}
	ns := gitops.Namespace
	manager := []access{
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: ns, allowed: true},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: ns, allowed: true},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, allowed: true},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: "default", allowed: false},
		{verb: "create", resource: "events", namespace: ns, allowed: true},
		{verb: "create", group: "events.k8s.io", resource: "events", namespace: ns, allowed: true},
		{verb: "get", resource: "secrets", namespace: ns, allowed: true},
		{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews", allowed: true},
		{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews", allowed: true},
		{verb: "watch", group: "hypervisor.hyperfleet.io", resource: "machineclaims", allowed: true},
		{verb: "patch", group: "hypervisor.hyperfleet.io", resource: "machineclaims/status", allowed: true},
		{verb: "watch", group: "cyberdesk.io", resource: "cyberdesks", allowed: true},
		{verb: "watch", group: "hourglass.eigenlayer.io", resource: "performers", allowed: true},
		{verb: "create", group: "kubevirt.io", resource: "virtualmachines", namespace: "desks", allowed: true},
		{verb: "get", resource: "configmaps", namespace: ns, allowed: true},
		// RunnerPools make a MachineClaim per runner.
		{verb: "create", group: "hypervisor.hyperfleet.io", resource: "machineclaims", allowed: true},
		// Every replica records webhook demand as RunnerJobs; the leader prunes them.
		{verb: "create", group: "hypervisor.hyperfleet.io", resource: "runnerjobs", namespace: "ci", allowed: true},
		{verb: "patch", group: "hypervisor.hyperfleet.io", resource: "runnerjobs", namespace: "ci", allowed: true},
		{verb: "delete", group: "hypervisor.hyperfleet.io", resource: "runnerjobs", namespace: "ci", allowed: true},
		{verb: "update", group: "hypervisor.hyperfleet.io", resource: "runnerjobs", namespace: "ci", allowed: false},
		// Never a cluster-wide Secret list or watch: Secrets elsewhere are read with a GET.
		{verb: "get", resource: "secrets", namespace: "desks", allowed: true},
		{verb: "list", resource: "secrets", namespace: "desks", allowed: false},
		{verb: "watch", resource: "secrets", allowed: false},
		// Secrets the operator makes are changed with merge patches (with an
		// optimistic lock where it matters), never whole-object updates.
		{verb: "patch", resource: "secrets", namespace: "desks", allowed: true},
		{verb: "update", resource: "secrets", namespace: "desks", allowed: false},
		{verb: "deletecollection", resource: "secrets", namespace: "desks", allowed: false},
		// Users of the tenant ClusterRoles hold them through their own
		// bindings; the operator never binds or escalates.
		{verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles", allowed: false},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles", allowed: false},
		// A cluster's finalizer and held-Secrets annotation are merge patches.
		{verb: "patch", group: "hypervisor.hyperfleet.io", resource: "hypervisorclusters", allowed: true},
		// The default installation id is the operator namespace's UID: that
		// namespace may be read, no other.
		{verb: "get", resource: "namespaces", namespace: ns, name: ns, allowed: true},
		{verb: "get", resource: "namespaces", namespace: "default", name: "default", allowed: false},
		{verb: "list", resource: "namespaces", allowed: false},
		// Not more.
		{verb: "update", group: "hypervisor.hyperfleet.io", resource: "hypervisorclusters", allowed: false},
		{verb: "delete", resource: "namespaces", allowed: false},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings", allowed: false},
		{verb: "create", resource: "pods/exec", namespace: ns, allowed: false},
		{verb: "get", path: "/metrics", allowed: false},
	}
	scraper := []access{
		{verb: "get", path: "/metrics", allowed: true},
		{verb: "get", resource: "secrets", namespace: ns, allowed: false},
		{verb: "list", group: "hypervisor.hyperfleet.io", resource: "machineclaims", allowed: false},
	}
	for sa, checks := range map[string][]access{"hyperfleet-manager": manager, "hyperfleet-metrics-scraper": scraper} {
		for _, a := range checks {
			checkAccess(ctx, t, sa, a)
		}
	}
}
