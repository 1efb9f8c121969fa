package runnerpool

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// notesLab is one pool with one running claim on a fake API server that
// counts the patches made to claims.
type notesLab struct {
	r    *Reconciler
	c    client.Client
	pool *hypervisorv1alpha1.RunnerPool
	mem  *poolMemory

	mu      sync.Mutex
	patches int
}

func newNotesLab(t *testing.T) *notesLab {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := hypervisorv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	l := &notesLab{pool: &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "0123456789abcdef"}},
		mem: newPoolMemory()}
	claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Namespace: "ns", Labels: map[string]string{PoolLabel: "p"}}}
	claim.Status.Phase = hypervisorv1alpha1.MachineRunning
	l.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(claim).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			l.mu.Lock()
			l.patches++
			l.mu.Unlock()
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	l.r = &Reconciler{Client: l.c}
	return l
}

// reconcile sorts the pool's claims as read (the cache) against runner rn
// at now, then writes the notes, and returns the scope and the patches made.
func (l *notesLab) reconcile(t *testing.T, now time.Time, claims []hypervisorv1alpha1.MachineClaim, rn github.Runner) (*scope, int) {
	t.Helper()
	rn.Labels = append(RunnerLabels(l.pool), poolRunnerLabel(l.pool))
	s := &scope{pool: l.pool, now: now, mem: l.mem, demand: &poolDemand{named: map[string]bool{}},
		listed: map[string]*hypervisorv1alpha1.MachineClaim{}}
	for i := range claims {
		s.listed[claims[i].Name] = &claims[i]
	}
	obs := l.r.observe(s, claims, []github.Runner{rn})
	s.obs = &obs
	l.mu.Lock()
	before := l.patches
	l.mu.Unlock()
	if _, err := l.r.writeNotes(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return s, l.patches - before
}

// read is the claims as the API server has them now.
func (l *notesLab) read(t *testing.T) []hypervisorv1alpha1.MachineClaim {
	t.Helper()
	var list hypervisorv1alpha1.MachineClaimList
	if err := l.c.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// A runner's notes are written when they change, one patch a transition,
// and not again by a reconcile that sees them, nor by one whose read is
// older than the write: it reads what this process decided.
func TestRunnerNotesAreWrittenOnTransitions(t *testing.T) {
	l := newNotesLab(t)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	stale := l.read(t)
	idle := github.Runner{ID: 1, Name: "p-a", Status: github.RunnerOnline}

	if _, n := l.reconcile(t, t0, stale, idle); n != 1 {
		t.Fatalf("first seen online and idle: %d patches, want 1 (both notes together)", n)
	}
	got := l.read(t)[0].Annotations
	if got[seenOnlineAnnotation] == "" || got[idleSinceAnnotation] != t0.Format(time.RFC3339Nano) {
		t.Fatalf("annotations %v, want seen online and idle since %s", got, t0)
	}
	// A read from before the write, a minute on: the runner has been idle
	// since t0 still. The note is written again (idempotent) only because
	// the read does not show it.
	s, _ := l.reconcile(t, t0.Add(time.Minute), stale, idle)
	if at := idleSince(s, &stale[0]); !at.Equal(t0) {
		t.Fatalf("a stale read: idle since %s, want %s", at, t0)
	}
	if _, n := l.reconcile(t, t0.Add(2*time.Minute), l.read(t), idle); n != 0 {
		t.Fatalf("steady idle: %d patches, want none", n)
	}
	busy := idle
	busy.Busy = true
	if _, n := l.reconcile(t, t0.Add(3*time.Minute), l.read(t), busy); n != 1 {
		t.Fatalf("seen busy: %d patches, want 1", n)
	}
	got = l.read(t)[0].Annotations
	if _, ok := got[idleSinceAnnotation]; ok || got[seenOnlineAnnotation] == "" {
		t.Fatalf("busy: annotations %v, want seen online and no idle since", got)
	}
	if _, n := l.reconcile(t, t0.Add(4*time.Minute), l.read(t), busy); n != 0 {
		t.Fatalf("steady busy: %d patches, want none", n)
	}
	if len(l.mem.notes) != 0 {
		t.Fatalf("notes the cache shows are still remembered: %v", l.mem.notes)
	}
}

// A new process (a restart, a new leader) reads what the last one learned
// from the claim: the idle runner's TTL runs from when it was first seen
// idle, and a registration-token runner seen online and now gone ran its
// job.
func TestRunnerNotesSurviveARestart(t *testing.T) {
	l := newNotesLab(t)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	idle := github.Runner{ID: 1, Name: "p-a", Status: github.RunnerOnline}
	l.reconcile(t, t0, l.read(t), idle)

	l.mem = newPoolMemory()
	claims := l.read(t)
	s, n := l.reconcile(t, t0.Add(time.Minute), claims, idle)
	if at := idleSince(s, &claims[0]); !at.Equal(t0) || n != 0 {
		t.Fatalf("after a restart: idle since %s, %d patches; want %s and none", at, n, t0)
	}

	l.pool.Spec.RegistrationMethod = hypervisorv1alpha1.RegistrationToken
	claims[0].Status.Phase = hypervisorv1alpha1.MachineTerminated
	l.mem = newPoolMemory()
	s, _ = l.reconcile(t, t0.Add(2*time.Minute), claims, github.Runner{Name: "other"})
	if len(s.obs.finished) != 1 {
		t.Fatalf("a token runner seen online before a restart, now gone: finished %d, want 1", len(s.obs.finished))
	}
}

// A claim update that changed only its notes wakes no pool reconcile; any
// other change does.
func TestNotesOnlyUpdatesWakeNoPool(t *testing.T) {
	old := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Namespace: "ns", ResourceVersion: "1",
		Annotations: map[string]string{createdAtAnnotation: "x"}}}
	noted := old.DeepCopy()
	noted.ResourceVersion = "2"
	noted.Annotations[idleSinceAnnotation] = "y"
	p := notNotesOnly()
	if p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: noted}) {
		t.Fatal("an update of the notes alone woke the pool")
	}
	ended := noted.DeepCopy()
	ended.ResourceVersion = "3"
	ended.Status.Phase = hypervisorv1alpha1.MachineTerminated
	if !p.Update(event.UpdateEvent{ObjectOld: noted, ObjectNew: ended}) {
		t.Fatal("a claim whose machine ended did not wake the pool")
	}
	if !p.Create(event.CreateEvent{Object: old}) || !p.Delete(event.DeleteEvent{Object: old}) {
		t.Fatal("a claim created or deleted did not wake the pool")
	}
}
