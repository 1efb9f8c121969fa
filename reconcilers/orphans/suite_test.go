package orphans_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/orphans"
)

// sweeperClock measures the sweeper's grace: tests step it instead of
// waiting the grace out. The grace is production's.
var sweeperClock = clocktesting.NewFakeClock(time.Now())

// sweepInterval paces the sweeps; only the grace is measured on the clock.
const sweepInterval = 100 * time.Millisecond

// One manager runs the orphan sweeper, and the HypervisorCluster reconciler
// whose Connected the tests wait for, against the package's control plane;
// kubevirtsim plays KubeVirt. Each test has its own namespace and simulator.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		ctx, cancel := context.WithCancel(context.Background())
		if err := hypervisorlab.InstallKubeVirt(ctx); err != nil {
			cancel()
			return nil, err
		}
		kvSim, err := kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()})
		if err != nil {
			cancel()
			return nil, err
		}
		mgr, err := hypervisorlab.NewManager()
		if err != nil {
			cancel()
			return nil, err
		}
		registry := hypervisorlab.NewRegistry(mgr)
		if err := (&hypervisorcluster.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("hypervisorcluster"),
		}).SetupWithManager(mgr); err != nil {
			cancel()
			return nil, err
		}
		if err := (&orphans.Sweeper{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("orphan-sweeper"),
			Clock: sweeperClock, Interval: sweepInterval, Grace: orphans.DefaultGrace,
		}).SetupWithManager(mgr); err != nil {
			cancel()
			return nil, err
		}
		stop := testenv.StartManager(mgr)
		return func() {
			stop()
			cancel()
			kvSim.Stop()
		}, nil
	})
}

// sweptWithin waits for cond while the grace passes: each poll steps the
// sweeper's clock by the grace, so an orphan one sweep first saw is past
// its grace at the next.
func sweptWithin(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	eventually.That(t, timeout, func() (bool, string) {
		sweeperClock.Step(orphans.DefaultGrace)
		ok, msg := cond()
		return ok, fmt.Sprintf("%s (sweeper clock at %s)", msg, sweeperClock.Now().Format(time.RFC3339))
	})
}
