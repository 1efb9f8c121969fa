package runnerpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// A new process (a restart, a new leader) reads what was learned of each
// runner from its claim: an idle runner's TTL runs from when it was first
// seen idle, and a registration-token runner seen online and now gone ran
// its job. The pool itself writes none of it, and wakes the runner's
// reconciler only for what its notes do not say yet.
func TestPoolReadsTheRunnersNotes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "0123456789abcdef"}}
	claim := hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Namespace: "ns", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)),
		Labels: map[string]string{PoolLabel: "p"},
		Annotations: map[string]string{
			runnerstate.SeenOnlineAnnotation: runnerstate.FormatTime(t0),
			runnerstate.IdleSinceAnnotation:  runnerstate.FormatTime(t0),
		}}}
	claim.Status.Phase = hypervisorv1alpha1.MachineRunning
	idle := github.Runner{ID: 1, Name: "p-a", Status: github.RunnerOnline, Labels: append(runnerstate.RunnerLabels(pool), runnerstate.PoolRunnerLabel(pool))}
	var woken []string
	r := &Reconciler{Wake: func(c *hypervisorv1alpha1.MachineClaim) { woken = append(woken, c.Name) }}
	look := func(now time.Time, c hypervisorv1alpha1.MachineClaim, runners ...github.Runner) *scope {
		s := &scope{pool: pool, now: now, mem: newPoolMemory(), demand: &poolDemand{named: map[string]bool{}}}
		obs := r.observe(s, []hypervisorv1alpha1.MachineClaim{c}, runners)
		s.obs = &obs
		return s
	}

	s := look(t0.Add(time.Minute), claim, idle)
	if len(s.obs.idle) != 1 || !idleSince(s, s.obs.idle[0]).Equal(t0) || len(woken) != 0 {
		t.Fatalf("after a restart: %d idle, idle since %v, woken %v; want 1 idle since %s and no wake", len(s.obs.idle), idleSince(s, s.obs.idle[0]), woken, t0)
	}

	busy := idle
	busy.Busy = true
	if s := look(t0.Add(2*time.Minute), claim, busy); len(s.obs.busy) != 1 || len(woken) != 1 {
		t.Fatalf("seen busy with an idle-since note: %d busy, woken %v; want 1 busy and its runner woken to drop the note", len(s.obs.busy), woken)
	}

	pool.Spec.RegistrationMethod = hypervisorv1alpha1.RegistrationToken
	ended := *claim.DeepCopy()
	ended.Status.Phase = hypervisorv1alpha1.MachineTerminated
	if s := look(t0.Add(3*time.Minute), ended); len(s.obs.finished) != 1 {
		t.Fatalf("a token runner seen online before a restart, now gone: finished %d, want 1", len(s.obs.finished))
	}
}

// A claim update that changed only its notes wakes no pool reconcile; any
// other change does.
func TestNotesOnlyUpdatesWakeNoPool(t *testing.T) {
	old := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Namespace: "ns", ResourceVersion: "1",
		Annotations: map[string]string{runnerstate.CreatedAtAnnotation: "x"}}}
	noted := old.DeepCopy()
	noted.ResourceVersion = "2"
	noted.Annotations[runnerstate.IdleSinceAnnotation] = "y"
	noted.Annotations[runnerstate.RetireAnnotation] = "z"
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
