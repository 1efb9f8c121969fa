package machineclaim

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// A claim waiting for a clone slot is reconciled again and again before its
// machine starts: its join-token Secret is read once, not at each.
func TestTheJoinTokenSecretIsReadOnceUntilTheMachineStarts(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t)
	c := testenv.Client()
	claim := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "waiting", Namespace: ns},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "none"}},
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: attestationSecretName(claim), Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: hypervisorv1alpha1.GroupVersion.String(), Kind: "MachineClaim", Name: claim.Name, UID: claim.UID, Controller: ptr.To(true)}}},
		Data: map[string][]byte{joinTokenKey: []byte("token")},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	reads := &countingReader{Reader: c}
	r := &Reconciler{Client: c, APIReader: reads}
	for range 3 {
		got, err := r.attestationSecret(ctx, claim)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil || string(got.Data[joinTokenKey]) != "token" {
			t.Fatalf("read %v; want the claim's Secret", got)
		}
	}
	if reads.gets != 1 {
		t.Errorf("three reconciles read the Secret %d times; want once", reads.gets)
	}
	// Forgotten with the claim: a claim of the same name made again reads
	// its own.
	r.attestSecrets.Forget(client.ObjectKeyFromObject(claim))
	if _, err := r.attestationSecret(ctx, claim); err != nil || reads.gets != 2 {
		t.Errorf("after the claim's memory was forgotten: %v, %d reads; want a second read", err, reads.gets)
	}
}

type countingReader struct {
	client.Reader
	gets int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets++
	return r.Reader.Get(ctx, key, obj, opts...)
}
