package attestation

import (
	"context"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// laggingCache is the manager's cache a moment behind the API server: it
// does not know yet the claim that took the machine.
type laggingCache struct{ client.Reader }

func (laggingCache) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// A standby machine's request read right after its claim took it: the
// standby claim is gone as stored, the cache does not show the taker's
// record yet. The machine is answered as the taker's, not "no such
// machine", which would make its agent stop asking for good.
func TestTakerFoundWhileTheCacheLags(t *testing.T) {
	ctx := context.Background()
	ns, c := testenv.Namespace(t), testenv.Client()
	gone := spire.MachineID{TrustDomain: "example.org", Installation: "inst", Kind: MachineKind, Namespace: ns, Name: "tmpl-standby-abcde", UID: "5c3a1e5e-0000-4000-8000-000000000001"}
	peer, err := gone.Workload(spire.BootstrapWorkload)
	if err != nil {
		t.Fatal(err)
	}
	taker := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "runner-1", Namespace: ns},
		Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "tmpl"}}}
	if err := c.Create(ctx, taker); err != nil {
		t.Fatal(err)
	}
	taker.Status.Attestation = &hypervisorv1alpha1.MachineAttestationStatus{Phase: hypervisorv1alpha1.AttestationAttested, SPIFFEID: peer}
	if err := c.Status().Update(ctx, taker); err != nil {
		t.Fatal(err)
	}
	e := &Endpoint{Reader: c, Cache: laggingCache{}}
	got, refused := e.claimOf(ctx, gone, peer)
	if refused != nil {
		t.Fatalf("answered %d %s (%s); want the taker", refused.code, refused.result, refused.message)
	}
	if got.Name != taker.Name {
		t.Fatalf("found claim %s; want %s", got.Name, taker.Name)
	}
	// A machine whose claim is gone and that no claim took is unknown.
	other := gone
	other.Name, other.UID = "nobody", "5c3a1e5e-0000-4000-8000-000000000002"
	otherPeer, _ := other.Workload(spire.BootstrapWorkload)
	if _, refused := e.claimOf(ctx, other, otherPeer); refused == nil || refused.code != http.StatusNotFound {
		t.Fatalf("a machine nobody holds: %+v; want 404", refused)
	}
}
