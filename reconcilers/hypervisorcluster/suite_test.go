package hypervisorcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisormachinetemplate"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
)

// retryCap caps the pause before a failed check is retried (the provider's
// backoff hint, 10 s after a 5xx), so a test that clears a fault does not
// wait it out.
const retryCap = 200 * time.Millisecond

// The deletion timeouts of the suite: a claim gives up on its machine only
// well after its cluster does, so a deadline test sees the cluster released
// with the claim still there. Tests step clk past them, never wait them out.
const (
	clusterDeletionTimeout = 30 * time.Minute
	claimFinalization      = time.Hour
)

// clk is the clusters' and claims' clock: real time plus what the tests
// stepped it by.
var clk = &testenv.SteppedClock{}

// One manager runs the HypervisorCluster reconciler against the package's
// control plane, with what deleting a cluster waits for: MachineClaims (and
// their templates), on Proxmox simulators and on KubeVirt played by
// kubevirtsim. Each test has its own namespace and simulator.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		ctx, cancel := context.WithCancel(context.Background())
		fail := func(err error) (func(), error) { cancel(); return nil, err }
		if err := hypervisorlab.InstallKubeVirt(ctx); err != nil {
			return fail(err)
		}
		kv, err := kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()})
		if err != nil {
			return fail(err)
		}
		mgr, err := hypervisorlab.NewManager()
		if err != nil {
			return fail(err)
		}
		registry := hypervisorlab.NewRegistry(mgr)
		if err := (&hypervisorcluster.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, APIReader: mgr.GetAPIReader(),
			Recorder: mgr.GetEventRecorder("hypervisorcluster"), RetryCap: retryCap,
			Clock: clk, DeletionTimeout: clusterDeletionTimeout,
		}).SetupWithManager(mgr); err != nil {
			return fail(err)
		}
		if err := (&hypervisormachinetemplate.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("hypervisormachinetemplate"),
		}).SetupWithManager(mgr); err != nil {
			return fail(err)
		}
		if err := (&machineclaim.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Credentials: registry.Credentials, APIReader: mgr.GetAPIReader(),
			Recorder: mgr.GetEventRecorder("machineclaim"), Clock: clk,
			ObserveInterval: time.Second, FinalizationTimeout: claimFinalization,
		}).SetupWithManager(mgr); err != nil {
			return fail(err)
		}
		stop := testenv.StartManager(mgr)
		return func() {
			stop()
			cancel()
			kv.Stop()
		}, nil
	})
}
