package runnerpool_test

import (
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

// An idle runner the pool has decided to remove takes a job before the
// pool's call that would remove it: just before its fresh look at the
// runner (the GET sees it busy), or between that look and the
// deregistration (GitHub refuses the DELETE with 422). Either way the
// runner and its machine stay until the job is done, and the job succeeds;
// deleting the machine would stop the runner mid-job (runnersim does what
// a deleted VM does), and the job would fail.
func TestRunnerTakingAJobDuringScaleDownSurvives(t *testing.T) {
	for _, tc := range []struct{ name, pool, endpoint string }{
		{"JobBeforeTheLook", "raceget", githubsim.EndpointRepoGetRunner},
		{"JobBeforeTheDelete", "racedel", githubsim.EndpointRepoDeleteRunner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			one := int32(1)
			pool := l.pool(tc.pool, func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Replicas = &one })
			defer func() { _ = l.c.Delete(rootCtx, pool) }()
			victim := l.onlyClaim(tc.pool)
			var runnerID int64
			eventually.That(t, time.Minute, func() (bool, string) {
				for _, r := range gh.Runners() {
					if r.Name == victim.Name && r.Status == "online" && !r.Busy {
						runnerID = r.ID
					}
				}
				p := l.get(tc.pool)
				return runnerID != 0 && p.Status.IdleReplicas == 1, fmt.Sprintf("runner %d; %s", runnerID, describe(p))
			})
			job := "raced-" + tc.pool
			if err := gh.InjectFault(githubsim.Fault{Endpoint: tc.endpoint, Path: fmt.Sprintf(`/actions/runners/%d$`, runnerID),
				Action: githubsim.FaultStartJob, Times: 1,
				Job: githubsim.JobSpec{Repo: repo, Labels: []string{"self-hosted", tc.pool}, Name: job, Duration: 3 * time.Second}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gh.ClearFaults)
			// Scale to zero: the idle runner is above what the pool wants,
			// and once past its idle TTL the pool removes it.
			p := l.get(tc.pool)
			patch := client.MergeFrom(p.DeepCopy())
			zero := int32(0)
			p.Spec.Replicas = &zero
			if err := l.c.Patch(rootCtx, p, patch); err != nil {
				t.Fatal(err)
			}
			var raced githubsim.Job
			eventually.That(t, time.Minute, func() (bool, string) {
				idleTTLPasses(l.get(tc.pool))
				for _, j := range gh.Jobs() {
					if j.Name == job {
						raced = j
					}
				}
				return raced.ID != 0, fmt.Sprintf("no job landed on the runner yet; %s", describe(l.get(tc.pool)))
			})
			if raced.RunnerID != runnerID {
				t.Fatalf("the raced job %+v did not land on runner %d, the one being removed", raced, runnerID)
			}
			eventually.That(t, time.Minute, func() (bool, string) { return jobDone(raced.ID) })
			if j, _ := gh.Job(raced.ID); j.Conclusion != "success" {
				t.Fatalf("the job the runner took during its scale-down ended %q: its machine was deleted under it", j.Conclusion)
			}
			// The ephemeral runner is done: it goes, and nothing replaces it.
			eventually.That(t, time.Minute, func() (bool, string) {
				return len(l.claims()) == 0 && registered(tc.pool) == 0, describe(l.get(tc.pool))
			})
		})
	}
}
