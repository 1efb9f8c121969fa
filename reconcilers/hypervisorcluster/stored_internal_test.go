package hypervisorcluster

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// claimsNotYetSeen is a cache that has not yet seen any MachineClaim: the
// moment after one was created, before its watch event arrived.
type claimsNotYetSeen struct{ client.Client }

func (c claimsNotYetSeen) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*hypervisorv1alpha1.MachineClaimList); ok {
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

// A deleting cluster whose cache has not seen a claim that is beginning its
// machine on it must not be released: the claim, created a moment before
// the cluster was deleted, made its VM after the cluster let go, and the VM
// was stranded with no cluster left to delete it (found by
// TestPropertyMachineLifecycleLeavesNothingBehind). "Nothing left" is
// confirmed on the claims as stored.
func TestDeletingClusterConfirmsNoClaimLeftAsStored(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t)
	c := testenv.Client()
	const hold = "test.hyperfleet.io/hold"
	cluster := &hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "going", Namespace: ns, Finalizers: []string{hold, Finalizer}},
		Spec:       hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt},
	}
	// The claim's template is not there, so the suite's own operator leaves
	// the claim's recorded machine as it is; what the cluster reads is its
	// status.clusterName.
	claim := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "begun", Namespace: ns},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "not-there"}},
	}
	for _, obj := range []client.Object{cluster, claim} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, obj := range []client.Object{claim, cluster} {
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
					return client.IgnoreNotFound(err)
				}
				obj.SetFinalizers(nil)
				return c.Update(ctx, obj)
			})
			_ = c.Delete(ctx, obj)
		}
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		claim.Status.ClusterName, claim.Status.MachineName = "going", "hf-begun"
		claim.Status.Provider = hypervisorv1alpha1.ProviderKubeVirt
		return c.Status().Update(ctx, claim)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		t.Fatal(err)
	}

	// The operator's own KubeVirt, which the suite installed: the cluster
	// can list it for orphans, and finds none, so only the claims decide.
	registry := &hypervisors.Registry{APIReader: c, Factories: map[hypervisorv1alpha1.ProviderType]hypervisors.Factory{
		hypervisorv1alpha1.ProviderKubeVirt: hypervisors.KubeVirt(hypervisors.LocalCluster{
			Client: c, Reader: c, Scheme: c.Scheme(), Installation: "hf-stored-test",
		}),
	}}
	r := &Reconciler{Client: claimsNotYetSeen{c}, APIReader: c, Hypervisors: registry,
		Recorder: events.NewFakeRecorder(10), DeletionTimeout: time.Hour}
	s := &scope{cluster: cluster, now: time.Now(), patch: skeleton.NewStatusPatch(c, cluster)}
	res, err := r.finalize(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if s.patch.Released() {
		t.Fatal("the cluster was released while a claim, unseen by its cache, has a machine on it")
	}
	if s.deleting == nil || len(s.deleting.claims) != 1 || s.deleting.claims[0] != "begun" {
		t.Errorf("the deleting cluster waits for %+v, want claim begun", s.deleting)
	}
	if res.RequeueAfter == 0 {
		t.Errorf("the waiting cluster asked for no look again: %+v", res)
	}
}
