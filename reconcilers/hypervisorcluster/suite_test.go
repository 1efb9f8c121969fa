package hypervisorcluster_test

import (
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
)

// retryCap caps the pause before a failed check is retried (the provider's
// backoff hint, 10 s after a 5xx), so a test that clears a fault does not
// wait it out.
const retryCap = 200 * time.Millisecond

// One manager runs the HypervisorCluster reconciler alone against the
// package's control plane; each test has its own namespace and simulator.
func TestMain(m *testing.M) {
	hypervisorlab.Main(m, func(mgr ctrl.Manager, registry *hypervisors.Registry) error {
		return (&hypervisorcluster.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry,
			Recorder: mgr.GetEventRecorder("hypervisorcluster"), RetryCap: retryCap,
		}).SetupWithManager(mgr)
	})
}
