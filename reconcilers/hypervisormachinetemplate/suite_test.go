package hypervisormachinetemplate_test

import (
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisormachinetemplate"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
)

// One manager runs the HypervisorMachineTemplate reconciler, and the
// HypervisorCluster reconciler it waits on (a template is checked only
// against a Ready cluster), against the package's control plane; each test
// has its own namespace and simulator.
func TestMain(m *testing.M) {
	hypervisorlab.Main(m, func(mgr ctrl.Manager, registry *hypervisors.Registry) error {
		if err := (&hypervisorcluster.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("hypervisorcluster"),
		}).SetupWithManager(mgr); err != nil {
			return err
		}
		return (&hypervisormachinetemplate.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("hypervisormachinetemplate"),
		}).SetupWithManager(mgr)
	})
}
