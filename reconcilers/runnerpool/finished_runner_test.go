package runnerpool_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
)

// A runner finishes its job before the job's in_progress and completed
// deliveries are recorded: here they are lost, as when they reach a
// replica that dies (a burst's delivery backlog delays them the same way).
// The job is still recorded queued, but the finished runner stands for it:
// the pool makes no second runner for it, and keeps the finished runner's
// stopped machine until a record names the runner, which is what carries
// the count across a failover. Once the deliveries are redelivered the
// claim goes, and no runner was ever made for nothing.
func TestFinishedRunnerStandsForItsUnrecordedJob(t *testing.T) {
	l := newLab(t)
	l.pool("lagging", func(p *hypervisorv1alpha1.RunnerPool) {
		// Deliveries alone feed the pool: the poll would close the record.
		p.Spec.WebhookScaling = &hypervisorv1alpha1.WebhookScaling{PollInterval: &metav1.Duration{}}
	})
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("lagging")
		return readyReason(p) == "Ready", describe(p)
	})
	id, err := gh.QueueJob(repo, []string{"self-hosted", "lagging"})
	if err != nil {
		t.Fatal(err)
	}
	record := &hypervisorv1alpha1.RunnerJob{}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: runnerpool.JobName(id)}, record)
		return err == nil, fmt.Sprintf("record of job %d: %v", id, err)
	})
	// The job's next two deliveries, in_progress and completed, are lost.
	gh.DropNextDeliveries(2)

	seen := map[string]bool{}
	watchClaims := func() {
		t.Helper()
		for _, c := range l.claims() {
			seen[c.Name] = true
		}
		if len(seen) > 1 {
			t.Fatalf("runners %v were made for one job, whose runner finished before its in_progress was recorded", seen)
		}
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		watchClaims()
		return jobDone(id)
	})
	eventually.That(t, time.Minute, func() (bool, string) {
		watchClaims()
		cs := l.claims()
		return len(cs) == 1 && cs[0].Status.Phase == hypervisorv1alpha1.MachineTerminated,
			fmt.Sprintf("%d claims, want the finished runner's, Terminated: %+v", len(cs), cs)
	})
	// The pool reconciles every second (the suite's sync interval): five
	// seconds give it several chances to count the job a second time.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		watchClaims()
		time.Sleep(200 * time.Millisecond)
	}
	if err := l.c.Get(rootCtx, client.ObjectKeyFromObject(record), record); err != nil || record.Status.State != hypervisorv1alpha1.JobQueued {
		t.Fatalf("record %+v (%v): want it still queued, its deliveries lost", record.Status, err)
	}

	redelivered := 0
	for _, d := range gh.Deliveries() {
		if d.JobID == id && d.Attempted && d.StatusCode == 0 {
			if _, err := gh.Redeliver(d.ID); err != nil {
				t.Fatal(err)
			}
			redelivered++
		}
	}
	if redelivered != 2 {
		t.Fatalf("%d of the job's deliveries were lost, want 2 (in_progress, completed)", redelivered)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		watchClaims()
		return len(l.claims()) == 0 && registered("lagging") == 0, describe(l.get("lagging"))
	})
	if err := l.c.Get(rootCtx, client.ObjectKeyFromObject(record), record); err != nil || record.Status.State != hypervisorv1alpha1.JobCompleted {
		t.Fatalf("record %+v (%v): want it completed once redelivered", record.Status, err)
	}
}
