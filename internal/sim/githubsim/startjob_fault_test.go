package githubsim_test

import (
	"net/http"
	"testing"

	gogithub "github.com/google/go-github/v60/github"

	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

// FaultStartJob makes the runner a request names take a job just before the
// request is served: a GET then sees it busy, and a DELETE is refused
// with GitHub's 422, because the runner is busy by the time it is served.
func TestStartJobFaultMakesTheNamedRunnerBusy(t *testing.T) {
	for _, endpoint := range []string{githubsim.EndpointRepoGetRunner, githubsim.EndpointRepoDeleteRunner} {
		t.Run(endpoint, func(t *testing.T) {
			s := startSim(t, githubsim.Options{})
			gh := patClient(t, s)
			ctx := ctxT(t)
			var ids []int64
			for _, name := range []string{"idle-1", "idle-2"} {
				jit, _, err := gh.Actions.GenerateRepoJITConfig(ctx, "acme", "widgets", &gogithub.GenerateJITConfigRequest{Name: name, RunnerGroupID: 1, Labels: []string{"race"}})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.RunRunner(ctx, githubsim.RunRequest{JITConfig: jit.GetEncodedJITConfig()}); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, jit.GetRunner().GetID())
			}
			// The second runner, not the lowest-ID one dispatch would pick.
			victim := ids[1]
			if err := s.InjectFault(githubsim.Fault{Endpoint: endpoint, Action: githubsim.FaultStartJob, Times: 1,
				Job: githubsim.JobSpec{Repo: "acme/widgets", Labels: []string{"self-hosted", "race"}, Name: "raced"}}); err != nil {
				t.Fatal(err)
			}
			if endpoint == githubsim.EndpointRepoGetRunner {
				r, _, err := gh.Actions.GetRunner(ctx, "acme", "widgets", victim)
				if err != nil || !r.GetBusy() {
					t.Fatalf("the runner GET after the job landed: busy %v, %v", r.GetBusy(), err)
				}
			} else {
				_, err := gh.Actions.RemoveRunner(ctx, "acme", "widgets", victim)
				wantStatus(t, err, http.StatusUnprocessableEntity)
			}
			var raced []githubsim.Job
			for _, j := range s.Jobs() {
				if j.Name == "raced" {
					raced = append(raced, j)
				}
			}
			if len(raced) != 1 || raced[0].RunnerID != victim || raced[0].Status != githubsim.JobInProgress {
				t.Fatalf("the raced job %+v; want one in progress on runner %d", raced, victim)
			}
			if s.PendingFaults() != 0 {
				t.Fatal("a one-shot fault is still armed")
			}
		})
	}
}
