package hypervisorcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
)

// retryCap caps the pause before a failed check is retried (the provider's
// backoff hint, 10 s after a 5xx), so a test that clears a fault does not
// wait it out.
const retryCap = 200 * time.Millisecond

// One manager runs the HypervisorCluster reconciler alone against the
// package's control plane; each test has its own namespace and simulator.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		if err := hypervisorlab.InstallKubeVirt(context.Background()); err != nil {
			return nil, err
		}
		mgr, err := hypervisorlab.NewManager()
		if err != nil {
			return nil, err
		}
		if err := (&hypervisorcluster.Reconciler{
			Client: mgr.GetClient(), Hypervisors: hypervisorlab.NewRegistry(mgr),
			Recorder: mgr.GetEventRecorder("hypervisorcluster"), RetryCap: retryCap,
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		return testenv.StartManager(mgr), nil
	})
}
