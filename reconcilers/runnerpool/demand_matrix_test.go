package runnerpool_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
)

// A 200-job matrix on a pool of at most 12 runners, every "queued" delivery
// lost: the poll alone finds the jobs. Once the first runners start, GitHub
// shows the run in_progress with most of its jobs still queued, and later
// polls must keep them: every job is served, none dropped. Three jobs
// waiting for an environment's approval get no runner until approved.
func TestMatrixIsServedByThePollAndWaitingJobsWait(t *testing.T) {
	l := newLab(t)
	const poll = 10 * time.Second // the shortest the CRD allows; the test steps the fake clock by it
	l.pool("matrix", func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.MaxReplicas = 12
		p.Spec.WebhookScaling = &hypervisorv1alpha1.WebhookScaling{PollInterval: &metav1.Duration{Duration: poll}}
	})
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("matrix")
		return readyReason(p) == "Ready", describe(p)
	})
	gh.DropNextDeliveries(200)
	labels := []string{"self-hosted", "matrix"}
	ids, err := gh.QueueRun(githubsim.JobSpec{Repo: repo, Labels: labels, Matrix: 200, Duration: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := gh.QueueRun(githubsim.JobSpec{Repo: repo, Labels: labels, Matrix: 3, Waiting: true})
	if err != nil {
		t.Fatal(err)
	}
	// The fake clock is the suite's: it is stepped only for the two polls
	// the test needs, so claims' ages (registration timeout) stay true.
	firstPoll, secondPoll := false, false
	// stepped is the run listings githubsim had served at the last step:
	// the clock is stepped again only once a poll has run since.
	stepped := -1
	pollDue := func() {
		if n := gh.Stats()[githubsim.EndpointRepoListRuns]; stepped < 0 || n > stepped {
			clk.Step(poll)
			stepped = n
		}
	}
	peak := int32(0)
	eventually.That(t, 4*time.Minute, func() (bool, string) {
		p := l.get("matrix")
		peak = max(peak, p.Status.Replicas)
		if p.Status.Replicas > p.Spec.MaxReplicas {
			t.Fatalf("%d runners, above maxReplicas %d", p.Status.Replicas, p.Spec.MaxReplicas)
		}
		done := 0
		for _, id := range ids {
			if ok, _ := jobDone(id); ok {
				done++
			}
		}
		switch {
		case !firstPoll && p.Status.QueuedJobs == 0 && done == 0:
			// Until the first poll the pool knows of no job: the only way
			// it ever learns of them.
			pollDue()
		case p.Status.QueuedJobs > 0 && done == 0:
			firstPoll = true
		case !secondPoll && done >= 12 && done < len(ids)/2:
			// A poll while the run is in_progress and most of its jobs are
			// still queued: it must keep them.
			secondPoll = true
			stepped = -1
			pollDue()
		}
		return done == len(ids), fmt.Sprintf("%d of %d jobs done; peak %d; %s", done, len(ids), peak, describe(p))
	})
	if peak != 12 {
		t.Errorf("the pool peaked at %d runners; 200 queued jobs should take it to maxReplicas 12", peak)
	}
	for _, id := range waiting {
		if j, _ := gh.Job(id); j.Status != githubsim.JobWaiting || j.RunnerName != "" {
			t.Fatalf("waiting job %d: %+v", id, j)
		}
	}
	// The waiting jobs are recorded, counted apart, and make no runner: the
	// pool goes back to no runners while they wait.
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		p := l.get("matrix")
		idleTTLPasses(p)
		states := l.jobStates("matrix")
		return len(l.claims()) == 0 && p.Status.QueuedJobs == 0 && states[hypervisorv1alpha1.JobWaiting] == 3,
			fmt.Sprintf("%d claims; records %v; %s", len(l.claims()), states, describe(p))
	})
	for _, id := range waiting {
		if err := gh.ApproveJob(id); err != nil {
			t.Fatal(err)
		}
	}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		for _, id := range waiting {
			if ok, msg := jobDone(id); !ok {
				return false, msg + "; " + describe(l.get("matrix"))
			}
		}
		return true, ""
	})
	runners := map[string]int{}
	for _, id := range append(ids, waiting...) {
		j, _ := gh.Job(id)
		runners[j.RunnerName]++
	}
	for name, n := range runners {
		if n != 1 {
			t.Errorf("runner %s took %d jobs; ephemeral runners take one", name, n)
		}
	}
	t.Logf("matrix: %d jobs, %d runners, peak %d", len(ids)+len(waiting), len(runners), peak)
}

// jobStates counts the pool's RunnerJobs by state.
func (l *lab) jobStates(pool string) map[hypervisorv1alpha1.RunnerJobState]int {
	l.t.Helper()
	var list hypervisorv1alpha1.RunnerJobList
	if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns), client.MatchingLabels{runnerpool.PoolLabel: pool}); err != nil {
		l.t.Fatal(err)
	}
	out := map[hypervisorv1alpha1.RunnerJobState]int{}
	for _, j := range list.Items {
		out[j.Status.State]++
	}
	return out
}
