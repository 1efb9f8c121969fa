package poolprops_test

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/bench/runnerlab"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

const (
	repo     = runnerlab.Repo
	runnerVM = runnerlab.RunnerVM
)

var (
	gh      *githubsim.Server
	rootCtx = context.Background()
	// clk is the pools' clock: the commands step it for the poll, the
	// idle TTL and the finished runners' grace instead of waiting.
	clk = clocktesting.NewFakeClock(time.Now())
	// lab runs the operator, which the commands may restart.
	lab *runnerlab.Lab
)

// One kubevirtsim, one githubsim sending real signed workflow_job
// deliveries to the operator's receiver, stand-in agents inside the runner
// VMs, and an operator the commands may restart, for the whole package:
// the runner lab (internal/bench/runnerlab) with the suites' short
// intervals and clock.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		l, stop, err := runnerlab.Start(context.Background(), runnerlab.Options{
			Config: testenv.Config(), Client: testenv.Client(), WebhookSecret: "hook-s3cret",
			RateLimit: 50000, JobDuration: time.Hour,
			Manager: runnerlab.Suite(clk),
		})
		if err != nil {
			return nil, err
		}
		lab, gh = l, l.GitHub
		return stop, nil
	})
}

// ownerKind is the label KubeVirt VMs made for claims carry.
var ownerKind = client.MatchingLabels{kubevirt.LabelOwnerKind: "MachineClaim"}
