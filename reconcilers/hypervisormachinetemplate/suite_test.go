package hypervisormachinetemplate_test

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisormachinetemplate"
)

// One manager runs the HypervisorMachineTemplate reconciler, and the
// HypervisorCluster reconciler it waits on (a template is checked only
// against a Ready cluster), against the package's control plane; each test
// has its own namespace and simulator.
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
		registry := hypervisorlab.NewRegistry(mgr)
		if err := (&hypervisorcluster.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("hypervisorcluster"),
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&hypervisormachinetemplate.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("hypervisormachinetemplate"),
		}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		return testenv.StartManager(mgr), nil
	})
}
