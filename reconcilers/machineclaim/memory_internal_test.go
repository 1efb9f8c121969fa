package machineclaim

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// What the reconciler keeps of a claim between reconciles (its failures'
// backoff, its machine's boot) goes when the claim is let go of or gone:
// the driver forgets it, so no phase has to on every way out, and a
// process that sees claims come and go for weeks does not grow with them.
func TestAClaimReleasedOrGoneIsForgotten(t *testing.T) {
	ctx := context.Background()
	ns := testenv.Namespace(t)
	c := testenv.Client()
	// hold keeps the claim readable after its finalizer is released, so
	// the reconcile below sees it being deleted rather than gone.
	const hold = "test.hyperfleet.io/hold"
	deleting := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "deleting", Namespace: ns, Finalizers: []string{hold, Finalizer}},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "none"}},
	}
	kept := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: ns},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "none"}},
	}
	for _, o := range []*hypervisorv1alpha1.MachineClaim{deleting, kept} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if err := c.Get(ctx, client.ObjectKeyFromObject(deleting), deleting); err == nil {
			deleting.Finalizers = slices.DeleteFunc(deleting.Finalizers, func(f string) bool { return f == hold })
			_ = c.Update(ctx, deleting)
		}
	})
	// The gone claim was never stored: a NotFound names it, with no UID.
	gone := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: ns, UID: "gone"}}

	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), Clock: clock.RealClock{}}
	for _, o := range []*hypervisorv1alpha1.MachineClaim{deleting, kept, gone} {
		r.backoff.next(o, 0)
		r.booting.seen(o, time.Now(), "pve1")
	}
	// The suite's operator reconciles the claim too and may release it
	// first: the reconcile below then finds it let go of, which must
	// forget it just the same.
	if err := c.Delete(ctx, deleting); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*hypervisorv1alpha1.MachineClaim{deleting, gone} {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)}); err != nil {
			t.Fatalf("reconciling %s: %v", o.Name, err)
		}
		if _, ok := r.backoff.Load(o); ok {
			t.Errorf("claim %s's backoff is still remembered", o.Name)
		}
		if r.booting.known(o) {
			t.Errorf("claim %s's boot is still remembered", o.Name)
		}
	}
	if _, ok := r.backoff.Load(kept); !ok || !r.booting.known(kept) {
		t.Error("a claim neither released nor gone was forgotten")
	}
}
