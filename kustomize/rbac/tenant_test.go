package rbac_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/kustomize/rbac"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The shipped tenant roles aggregate into Kubernetes' own roles, so a team
// holding edit in its namespace gets them, and view reads them.
func TestTenantRolesAggregate(t *testing.T) {
	roles, err := rbac.TenantRoles()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"hyperfleet-tenant":      {"rbac.authorization.k8s.io/aggregate-to-edit", "rbac.authorization.k8s.io/aggregate-to-admin"},
		"hyperfleet-tenant-view": {"rbac.authorization.k8s.io/aggregate-to-view"},
	}
	for _, r := range roles {
		for _, l := range want[r.Name] {
			if r.Labels[l] != "true" {
				t.Errorf("ClusterRole %s lacks the label %s=true", r.Name, l)
			}
		}
		delete(want, r.Name)
		for _, rule := range r.Rules {
			for _, res := range rule.Resources {
				if strings.HasSuffix(res, "/status") {
					t.Errorf("ClusterRole %s grants %s: status is the operator's to write", r.Name, res)
				}
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("missing ClusterRoles: %v", want)
	}
}

// A tenant, as the threat model has it, writes the HyperFleet kinds and
// Secrets of its own namespace, and nothing else: not another namespace,
// not the operator's, not Pods, not the status the operator reports.
func TestTenantReachesOnlyItsNamespace(t *testing.T) {
	ctx := context.Background()
	ns, other := testenv.Namespace(t), testenv.Namespace(t)
	tenant := testenv.Tenant(t, ns)

	claim := func(namespace string) *hypervisorv1alpha1.MachineClaim {
		return &hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: namespace},
			Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "t"}},
		}
	}
	secret := func(namespace string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: namespace}, StringData: map[string]string{"k": "v"}}
	}
	own := []client.Object{
		claim(ns), secret(ns),
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: ns},
			Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt}},
	}
	for _, o := range own {
		if err := tenant.Create(ctx, o); err != nil {
			t.Errorf("the tenant cannot create %T in its own namespace: %v", o, err)
		}
	}
	mc := claim(ns)
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(mc), mc); err != nil {
		t.Fatal(err)
	}
	mc.Status.Phase = hypervisorv1alpha1.MachinePhase("Running")
	if err := tenant.Status().Update(ctx, mc); !apierrors.IsForbidden(err) {
		t.Errorf("a tenant wrote a claim's status (err %v): status is the operator's", err)
	}
	forbidden := []client.Object{
		claim(other), secret(other), secret("kube-system"),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
		// Demand records are the operator's: a tenant cannot forge a job.
		&hypervisorv1alpha1.RunnerJob{ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: ns}},
	}
	for _, o := range forbidden {
		if err := tenant.Create(ctx, o); !apierrors.IsForbidden(err) {
			t.Errorf("the tenant of %s created %T in %s (err %v)", ns, o, o.GetNamespace(), err)
		}
	}
	// ... but reads its namespace's.
	if err := tenant.List(ctx, &hypervisorv1alpha1.RunnerJobList{}, client.InNamespace(ns)); err != nil {
		t.Errorf("the tenant of %s cannot read its RunnerJobs: %v", ns, err)
	}
	var list corev1.SecretList
	if err := tenant.List(ctx, &list, client.InNamespace(other)); !apierrors.IsForbidden(err) {
		t.Errorf("the tenant of %s listed the Secrets of %s (err %v)", ns, other, err)
	}
}
