package machineclaim

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/sim/spirefake"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
)

// A claim whose token Secret and SPIRE entry were made, and whose status
// recording them was never written (the operator stopped in between), is
// deleted: its cleanup still removes both, worked out from the template.
// Before, a claim without status.attestation left the Secret for the
// garbage collector and the entry for the sweeper (found by
// TestPropertyMachineLifecycleLeavesNothingBehind, in an API server
// without a garbage collector).
func TestForgetAttestationWithoutItsStatus(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t)
	c := testenv.Client()
	const td, installation = "forget.example.org", "forget"
	fake := spirefake.NewServer(td)
	r := &Reconciler{Client: c, Attestation: &attestation.Registry{
		Installation: installation, AdminSocket: "/run/spire/admin.sock",
		Dial: func(_, _, inst string) (spire.Server, error) { return fake.Client(inst), nil },
	}}
	template := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		Attestation: &hypervisorv1alpha1.AttestationConfig{Method: hypervisorv1alpha1.AttestationJoinToken,
			SPIRE: &hypervisorv1alpha1.SPIREConfig{TrustDomain: td, ServerAddress: "spire.example.org:8081"}},
	}}
	claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "unrecorded", Namespace: ns, UID: types.UID("5d0c-unrecorded")}}

	// What register made before the status write that never came.
	m := machineID(claim, td, installation)
	workload, err := m.Workload(spire.BootstrapWorkload)
	if err != nil {
		t.Fatal(err)
	}
	server := fake.Client(installation)
	if _, err := server.CreateEntry(ctx, spire.EntrySpec{SPIFFEID: workload, Parent: m, Selectors: []spire.Selector{{Type: "unix", Value: "uid:0"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := server.CreateJoinToken(ctx, m, time.Minute); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: attestationSecretName(claim), Namespace: ns},
		Data: map[string][]byte{joinTokenKey: []byte("t"), spiffeIDKey: []byte(workload)}}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}

	r.forgetAttestation(ctx, claim, template)

	if err := c.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the claim's token Secret %s is still there (%v)", secret.Name, err)
	}
	entries, err := server.ListEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if id, _, err := spire.ParseID(e.SPIFFEID); err == nil && id.UID == string(claim.UID) {
			t.Errorf("SPIRE still holds %s for the deleted claim's machine", e.SPIFFEID)
		}
	}

	// A claim whose template does not attest has nothing to forget, and
	// its cleanup writes nothing.
	plain := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns, UID: "5d0c-plain"}}
	lookalike := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: attestationSecretName(plain), Namespace: ns}}
	if err := c.Create(ctx, lookalike); err != nil {
		t.Fatal(err)
	}
	r.forgetAttestation(ctx, plain, &hypervisorv1alpha1.HypervisorMachineTemplate{})
	if err := c.Get(ctx, client.ObjectKeyFromObject(lookalike), &corev1.Secret{}); err != nil {
		t.Errorf("a Secret named like a non-attesting claim's token Secret was touched: %v", err)
	}
}
