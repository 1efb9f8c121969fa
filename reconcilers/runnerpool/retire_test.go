package runnerpool

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// retireLab is a pool with n claims whose JIT runners ran their job and
// removed their registration, and whose machines ended: all of them are
// retired by retireFinished. block, when set, holds every claim deletion
// until it is closed.
type retireLab struct {
	r *Reconciler
	s *scope
	c client.Client

	mu             sync.Mutex
	inFlight, most int
	deleted        int
	block          chan struct{}
}

func newRetireLab(t *testing.T, n int, block chan struct{}) *retireLab {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := hypervisorv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "0123456789abcdef"}}
	l := &retireLab{block: block}
	var objs []client.Object
	obs := observed{byName: map[string]github.Runner{}}
	for i := range n {
		c := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%03d", i), Namespace: "ns"}}
		c.Status.Phase = hypervisorv1alpha1.MachineTerminated
		objs = append(objs, c)
		obs.gone = append(obs.gone, c.DeepCopy())
	}
	l.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*hypervisorv1alpha1.MachineClaim); !ok {
				return c.Delete(ctx, obj, opts...)
			}
			l.mu.Lock()
			l.inFlight++
			l.most = max(l.most, l.inFlight)
			l.mu.Unlock()
			if l.block != nil {
				<-l.block
			}
			err := c.Delete(ctx, obj, opts...)
			l.mu.Lock()
			l.inFlight--
			if err == nil {
				l.deleted++
			}
			l.mu.Unlock()
			return err
		},
	}).Build()
	l.r = &Reconciler{Client: l.c}
	l.s = &scope{pool: pool, now: time.Now(), obs: &obs, demand: &poolDemand{named: map[string]bool{}},
		mem: &poolMemory{refreshedFor: map[string]bool{}, creating: map[string]time.Time{}}}
	return l
}

func (l *retireLab) counts() (inFlight, most, deleted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight, l.most, l.deleted
}

// The pool's scale-up runs after retireFinished in the same reconcile, so
// finished runners are removed several at a time: removed one after
// another, the 130 a 500-job burst had finished held the reconcile 25.7 s
// and the jobs still queued waited for it (docs/performance.md, "Runner latency").
func TestRetireFinishedRemovesRunnersConcurrently(t *testing.T) {
	block := make(chan struct{})
	l := newRetireLab(t, 2*retireParallelism, block)
	done := make(chan error, 1)
	go func() {
		_, err := l.r.retireFinished(t.Context(), l.s)
		done <- err
	}()
	eventually.That(t, 30*time.Second, func() (bool, string) {
		inFlight, _, _ := l.counts()
		return inFlight == retireParallelism, fmt.Sprintf("%d claim deletions in flight at once, want %d", inFlight, retireParallelism)
	})
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, most, deleted := l.counts(); most != retireParallelism || deleted != 2*retireParallelism {
		t.Fatalf("%d deletions at most at once, %d claims deleted; want %d and %d", most, deleted, retireParallelism, 2*retireParallelism)
	}
}

// One reconcile retires at most maxRetiresPerReconcile runners, so the
// scale-up after it never waits on a whole burst's worth; the rest are
// retired by the next reconcile, which it asks for soon.
func TestRetireFinishedBoundsOneReconcile(t *testing.T) {
	l := newRetireLab(t, maxRetiresPerReconcile+7, nil)
	res, err := l.r.retireFinished(t.Context(), l.s)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, deleted := l.counts(); deleted != maxRetiresPerReconcile || res.RequeueAfter <= 0 {
		t.Fatalf("%d claims deleted, requeue after %s; want %d and a requeue", deleted, res.RequeueAfter, maxRetiresPerReconcile)
	}
	// The next reconcile sees the rest.
	l.s.obs.gone = l.s.obs.gone[maxRetiresPerReconcile:]
	res, err = l.r.retireFinished(t.Context(), l.s)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, deleted := l.counts(); deleted != maxRetiresPerReconcile+7 || res.RequeueAfter != 0 {
		t.Fatalf("%d claims deleted in all, requeue after %s; want %d and none", deleted, res.RequeueAfter, maxRetiresPerReconcile+7)
	}
}
