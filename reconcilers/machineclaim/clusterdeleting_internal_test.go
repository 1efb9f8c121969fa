package machineclaim

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// A claim reconciled from a cache that has not yet seen its own checkpoint
// (its machine's reference recorded, the create call made) while its
// cluster is being deleted must not give the machine up: the stored claim
// has one. Before the fix the claim said ClusterDeleting and stopped, the
// deleting cluster counted its machine as never begun, and the half-made
// VM was stranded (found by TestPropertyMachineLifecycleLeavesNothingBehind).
func TestClusterDeletingIsDecidedOnTheClaimAsStored(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t)
	c := testenv.Client()
	const hold = "test.hyperfleet.io/hold"
	cluster := &hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "going", Namespace: ns, Finalizers: []string{hold}},
		Spec:       hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt},
	}
	template := &hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "on-going", Namespace: ns},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{ClusterRef: meta.LocalObjectReference{Name: "going"},
			KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"spec":{"domain":{"devices":{}}}}}}`)}}},
	}
	claim := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "begun", Namespace: ns},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "on-going"}},
	}
	// The suite's operator sees these objects too; nothing it writes
	// changes what is checked here.
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err == nil {
			cluster.Finalizers = slices.DeleteFunc(cluster.Finalizers, func(f string) bool { return f == hold })
			_ = c.Update(ctx, cluster)
		}
	})
	if err := c.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, template); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	// The checkpoint, as stored: the machine's reference recorded.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		claim.Status.MachineName, claim.Status.ClusterName = "hf-begun", "going"
		claim.Status.Provider = hypervisorv1alpha1.ProviderKubeVirt
		return c.Status().Update(ctx, claim)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The cache's copy: the claim before its checkpoint.
	stale := claim.DeepCopy()
	stale.Status = hypervisorv1alpha1.MachineClaimStatus{}

	r := &Reconciler{Client: c, APIReader: c, Hypervisors: &hypervisors.Registry{}, Recorder: events.NewFakeRecorder(10)}
	s := &scope{claim: stale, now: time.Now(), patch: skeleton.NewStatusPatch(c, stale)}
	if _, err := r.resolve(ctx, s); err != nil {
		t.Fatal(err)
	}
	if s.blocked != nil && s.blocked.reason == ReasonClusterDeleting {
		t.Fatalf("the claim gave up its begun machine on a stale read: %s: %s", s.blocked.reason, s.blocked.message)
	}
	if s.claim.Status.MachineName != "hf-begun" {
		t.Errorf("status.machineName %q after resolve, want the stored hf-begun", s.claim.Status.MachineName)
	}
	if base := s.patch.Before().(*hypervisorv1alpha1.MachineClaim); base.Status.MachineName != "hf-begun" {
		t.Errorf("the status write's base has machine %q: it would be computed against the stale copy", base.Status.MachineName)
	}
}
