package gitops_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// exampleNamespace is the namespace the component's RoleBinding and flag
// name, for the platform engineer to replace.
const exampleNamespace = "team-a"

// With the namespaced component the manager holds its rights only in the
// namespaces it watches, and they are enough: run as its ServiceAccount
// (impersonated) with nothing but the RBAC the base and the component
// render, the operator turns a claim in its namespace Ready, never touches
// the claim of a namespace it was not given, and the API server refuses it
// every Secret, Pod and claim there.
func TestNamespacedInstallation(t *testing.T) {
	ctx := context.Background()
	c := testenv.Client()
	given := hypervisorlab.Proxmox(t)
	other := hypervisorlab.ProxmoxSharing(t, given)

	objs := built(t, gitops.BaseDir, gitops.NamespacedDir)
	if gitops.Find(objs, "ClusterRoleBinding", "hyperfleet-manager") != nil {
		t.Fatal("the component keeps the cluster-wide binding of the manager's ClusterRole")
	}
	_, container := managerContainer(t, objs)
	opts := parseRunFlags(t, container.Args)
	if len(opts.Namespaces) != 1 || opts.Namespaces[0] != exampleNamespace {
		t.Fatalf("--namespaces = %v, want the example namespace %s the RoleBinding names", opts.Namespaces, exampleNamespace)
	}
	createNamespace(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gitops.Namespace}})
	// The base's binding may be on this API server from another test; the
	// component's output has none, so neither may the server.
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "hyperfleet-manager"}}
	if err := c.Delete(ctx, crb); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	bound := 0
	for _, u := range objs {
		switch u.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		if u.GetKind() == "RoleBinding" && u.GetNamespace() == exampleNamespace {
			// What the platform engineer does: the example namespace
			// replaced by the one handed to HyperFleet.
			u.SetNamespace(given.NS)
			bound++
		}
		if err := apply(ctx, c, u.DeepCopy(), false); err != nil {
			t.Fatalf("%s: %v", gitops.ID(u), err)
		}
	}
	if bound != 1 {
		t.Fatalf("the component binds the manager in %d copies of the example namespace, want 1", bound)
	}

	const sa = "hyperfleet-manager"
	for _, a := range []access{
		{verb: "get", resource: "secrets", namespace: given.NS, allowed: true},
		{verb: "patch", group: "hypervisor.hyperfleet.io", resource: "machineclaims/status", namespace: given.NS, allowed: true},
		{verb: "create", resource: "pods", namespace: given.NS, allowed: true},
		{verb: "get", resource: "secrets", namespace: other.NS, allowed: false},
		{verb: "create", resource: "pods", namespace: other.NS, allowed: false},
		{verb: "list", group: "hypervisor.hyperfleet.io", resource: "machineclaims", namespace: other.NS, allowed: false},
		{verb: "watch", group: "hypervisor.hyperfleet.io", resource: "machineclaims", allowed: false},
		{verb: "get", resource: "secrets", namespace: "kube-system", allowed: false},
	} {
		checkAccess(ctx, t, sa, a)
	}
	// Its own namespace, for the installation id, and no other.
	for ns, allowed := range map[string]bool{gitops.Namespace: true, other.NS: false, "kube-system": false} {
		checkAccess(ctx, t, sa, access{verb: "get", resource: "namespaces", namespace: ns, name: ns, allowed: allowed})
	}

	cfg := testenv.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + gitops.Namespace + ":" + sa, Groups: []string{
		"system:serviceaccounts", "system:serviceaccounts:" + gitops.Namespace, "system:authenticated"}}
	mgr, err := manager.New(cfg, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: gitops.Namespace,
		Namespaces:      []string{given.NS},
		ObserveInterval: time.Second, FinalizationTimeout: 8 * time.Second,
		Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate, manager.ControllerMachineClaim},
	})
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, mgr)

	claim := func(l *hypervisorlab.Lab) *hypervisorv1alpha1.MachineClaim {
		mc := &hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: l.NS},
			Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
		}
		l.Create(mc)
		return mc
	}
	mine, theirs := claim(given), claim(other)
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		if err := given.Get(mine); err != nil {
			return false, err.Error()
		}
		return mine.Status.Phase == hypervisorv1alpha1.MachineReady,
			fmt.Sprintf("phase %q: %s", mine.Status.Phase, hypervisorlab.Describe("", mine.Status.Conditions))
	})
	if err := other.Get(theirs); err != nil {
		t.Fatal(err)
	}
	if theirs.Status.Phase != "" || len(theirs.Status.Conditions) > 0 || len(theirs.Finalizers) > 0 {
		t.Errorf("the claim in the namespace not given was handled: phase %q, finalizers %v", theirs.Status.Phase, theirs.Finalizers)
	}
	if vms := other.OwnedVMs(); len(vms) != 1 {
		// Both labs share one simulator: the one VM is the given namespace's.
		t.Errorf("%d owned VMs on the shared simulator, want 1 (the given namespace's claim)", len(vms))
	}

	// Deleting the given claim still completes under the narrowed rights.
	if err := c.Delete(ctx, mine); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		err := given.Get(&hypervisorv1alpha1.MachineClaim{ObjectMeta: mine.ObjectMeta})
		return apierrors.IsNotFound(err), fmt.Sprintf("claim still there (%v)", err)
	})
	if err := c.Delete(ctx, theirs); err != nil {
		t.Fatal(err)
	}
}
