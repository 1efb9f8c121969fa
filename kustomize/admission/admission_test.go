package admission_test

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
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
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: meta.LocalObjectReference{Name: "t"}},
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
