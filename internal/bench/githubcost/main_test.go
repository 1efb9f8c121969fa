package githubcost

import (
	"context"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/bench/runnerlab"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

const repo = runnerlab.Repo

var (
	lab *runnerlab.Lab
	gh  *githubsim.Server
)

// The runner lab (internal/bench/runnerlab): the manager with its runner
// flags' defaults, kubevirtsim, githubsim and the stand-in agents. Jobs
// run 200 ms, so the figures are the pools' requests, not the jobs' time;
// GitHub's budget of 5000 an hour is raised so the run is never
// throttled, and the figures are what the pools ask for.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		l, stop, err := runnerlab.Start(context.Background(), runnerlab.Options{
			Config: testenv.Config(), Client: testenv.Client(), WebhookSecret: "hook-s3cret",
			RateLimit: 1_000_000, JobDuration: 200 * time.Millisecond,
		})
		if err != nil {
			return nil, err
		}
		lab, gh = l, l.GitHub
		return stop, nil
	})
}
