package runnerpool_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

// GitHub's known scale-set faults, each against a scale-set pool: the pool
// scales on the statistics and judges each runner by what GitHub lists of
// it, so no message arriving early, twice or never makes it kill a runner,
// leave one behind or lose demand.

// A JobCompleted that arrives while the job still runs leaves its runner
// alone: the job finishes on it.
func TestEarlyJobCompletedLeavesTheRunnerRunning(t *testing.T) {
	l := newLab(t)
	l.pool("ss-early", scaleSetPool("ss-early"))
	l.sessionOpen("ss-early")
	id := queueFor(t, "ss-early", 1, 6*time.Second)[0]
	eventually.That(t, time.Minute, func() (bool, string) {
		j, _ := gh.Job(id)
		return j.Status == githubsim.JobInProgress, fmt.Sprintf("job %+v", j)
	})
	if err := gh.CompleteEarly(id); err != nil {
		t.Fatal(err)
	}
	j, _ := gh.Job(id)
	runner := j.RunnerName
	// While GitHub still runs the job, its runner's claim stands.
	for {
		j, _ := gh.Job(id)
		if j.Status == githubsim.JobCompleted {
			break
		}
		gone := true
		for _, c := range l.claims() {
			if c.Name == runner && c.DeletionTimestamp == nil {
				gone = false
			}
		}
		if gone {
			t.Fatalf("runner %s's claim went while its job still ran, after an early JobCompleted", runner)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if j, _ := gh.Job(id); j.Conclusion != "success" || j.RunnerName != runner {
		t.Errorf("job %+v; want success on %s", j, runner)
	}
}

// A job cancelled while it runs leaves its runner registered and offline,
// never to run again (a ghost): the pool removes its registration and its
// machine.
func TestCancelledJobsGhostRunnerIsRemoved(t *testing.T) {
	l := newLab(t)
	l.pool("ss-ghost", scaleSetPool("ss-ghost"))
	l.sessionOpen("ss-ghost")
	id := queueFor(t, "ss-ghost", 1, time.Minute)[0]
	eventually.That(t, time.Minute, func() (bool, string) {
		j, _ := gh.Job(id)
		return j.Status == githubsim.JobInProgress, fmt.Sprintf("job %+v", j)
	})
	if err := gh.CancelLeavingGhost(id); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		p := l.get("ss-ghost")
		idleTTLPasses(p)
		return len(l.claims()) == 0 && registered("ss-ghost") == 0 && l.vms() == 0,
			fmt.Sprintf("claims %s, %d registered, %d VMs; %s", l.describeClaims(), registered("ss-ghost"), l.vms(), describe(p))
	})
}

// A lost session (a token GitHub no longer takes, then 5xx answers to the
// poll past the library's retries) is opened again without losing demand:
// jobs queued meanwhile are all served, from the new session's statistics.
func TestLostSessionKeepsTheDemand(t *testing.T) {
	l := newLab(t)
	l.pool("ss-lost", scaleSetPool("ss-lost"), func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.MaxReplicas = 3 })
	l.sessionOpen("ss-lost")
	sessions := gh.Calls(githubsim.EndpointSessionCreate)
	gh.ExpireSessionTokens()
	if err := gh.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointMessageGet, Action: githubsim.FaultHTTPError, Status: http.StatusBadGateway, Times: 12}); err != nil {
		t.Fatal(err)
	}
	ids := queueFor(t, "ss-lost", 5, time.Second)
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		done, msg := allDone(ids)
		return done, msg + "; " + describe(l.get("ss-lost"))
	})
	if n := gh.Calls(githubsim.EndpointSessionCreate); n <= sessions {
		t.Errorf("%d sessions created after the faults, %d before: the session was never lost, so this tested nothing", n, sessions)
	}
	l.sessionOpen("ss-lost")
}
