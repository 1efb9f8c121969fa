package admission_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/kustomize/admission"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The real API server stores a new claim with the operator's finalizer,
// beside the claim's own, and only on create: a claim whose finalizer was
// removed (released by the operator) does not get it back on update.
func TestNewClaimsAreStoredWithTheFinalizer(t *testing.T) {
	ctx := context.Background()
	c := testenv.Client()
	if err := admission.Install(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := admission.Install(ctx, c); err != nil {
		t.Fatalf("installing again: %v", err)
	}
	ns := testenv.Namespace(t)
	claim := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim", Finalizers: []string{"example.com/keep"}},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "t"}},
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(claim.Finalizers, machineclaim.Finalizer) {
		t.Fatalf("finalizers of a new claim %v; want the operator's added by the API server", claim.Finalizers)
	}
	if !slices.Contains(claim.Finalizers, "example.com/keep") {
		t.Fatalf("finalizers %v: the claim's own was dropped", claim.Finalizers)
	}
	claim.Finalizers = []string{"example.com/keep"}
	if err := c.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(claim.Finalizers, machineclaim.Finalizer) {
		t.Fatalf("finalizers after an update %v: the policy must act on create alone", claim.Finalizers)
	}
	claim.Finalizers = nil
	if err := c.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
}

// Creating a Performer or an HourglassExecutor makes the operator run its
// image as Pods: only a user who may make those Pods may create one. A
// tenant holding only the HyperFleet kinds is refused, naming the right it
// lacks; the same tenant with the rights of edit is not.
func TestWorkloadsNeedTheRightToMakePods(t *testing.T) {
	ctx := context.Background()
	c := testenv.Client()
	policy, err := admission.WorkloadPodsPolicy()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range policy {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	hourglass := func(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetAPIVersion("hourglass.eigenlayer.io/v1alpha1")
		u.SetKind(kind)
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	performer := func(ns, name string) *unstructured.Unstructured {
		return hourglass("Performer", ns, name, map[string]any{
			"avsAddress": "0x4444444444444444444444444444444444444444", "image": "performer", "version": "v1",
		})
	}
	executor := func(ns, name string) *unstructured.Unstructured {
		return hourglass("HourglassExecutor", ns, name, map[string]any{
			"image": "executor:v1", "aggregatorEndpoint": "agg:9000",
			"operatorKeys": map[string]any{"secretRef": map[string]any{"name": "keys"}},
			"chains": []any{map[string]any{"name": "ethereum", "chainId": int64(1), "rpcURL": "https://eth",
				"taskMailboxAddress": "0x2222222222222222222222222222222222222222"}},
		})
	}

	narrow := testenv.Namespace(t)
	tenant := testenv.Tenant(t, narrow)
	// The API server picks a new policy up from its informer a moment later.
	deadline := time.Now().Add(time.Minute)
	for {
		err := tenant.Create(ctx, performer(narrow, "p"), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "needs the right to create pods and services") {
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("refused as %v; want Forbidden", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a tenant without the right to make Pods may create a Performer (last answer %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := tenant.Create(ctx, executor(narrow, "e")); err == nil || !strings.Contains(err.Error(), "needs the right to create deployments.apps") {
		t.Errorf("a tenant without the right to make Deployments created an HourglassExecutor (err %v)", err)
	}

	wide := testenv.Namespace(t)
	editor := testenv.Tenant(t, wide,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create"}})
	if err := editor.Create(ctx, performer(wide, "p")); err != nil {
		t.Errorf("a tenant who may make Pods and Services cannot create a Performer: %v", err)
	}
	if err := editor.Create(ctx, executor(wide, "e")); err != nil {
		t.Errorf("a tenant who may make Deployments cannot create an HourglassExecutor: %v", err)
	}
}
