package machineclaim

import (
	"context"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// A claim reconciled again from a cache that does not yet show the status
// its last reconcile wrote (its own objects' events come faster than the
// cache) writes that status no second time and reports its transition
// once.
func TestAClaimReadBehindItsOwnWriteWritesAndReportsOnce(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := hypervisorv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	claim := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "behind", Namespace: "ns", Finalizers: []string{Finalizer}},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "absent"}},
	}
	var (
		mu           sync.Mutex
		stale        *hypervisorv1alpha1.MachineClaim
		statusWrites int
	)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(claim).
		WithStatusSubresource(&hypervisorv1alpha1.MachineClaim{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				mu.Lock()
				defer mu.Unlock()
				if mc, ok := obj.(*hypervisorv1alpha1.MachineClaim); ok && stale != nil {
					stale.DeepCopyInto(mc)
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				mu.Lock()
				statusWrites++
				mu.Unlock()
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	asMade := &hypervisorv1alpha1.MachineClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), asMade); err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: c, APIReader: c, Recorder: rec, Clock: clock.RealClock{}}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(claim)}

	_, _ = r.Reconcile(ctx, req)
	if statusWrites != 1 || len(rec.Events) != 1 {
		t.Fatalf("first reconcile: %d status writes, %d events; want 1 and 1 (the test proves nothing else)", statusWrites, len(rec.Events))
	}
	first := <-rec.Events
	// The cache still shows the claim as made.
	mu.Lock()
	stale = asMade
	mu.Unlock()
	_, _ = r.Reconcile(ctx, req)
	if statusWrites != 1 {
		t.Errorf("a reconcile from a cache behind the claim's own write wrote its status again (%d writes)", statusWrites)
	}
	if len(rec.Events) != 0 {
		t.Errorf("the transition was reported twice: %q, then %q", first, <-rec.Events)
	}
}
