package lifecycleprops_test

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// kvSim plays KubeVirt's controllers for every sequence's KubeVirt cluster.
var kvSim *kubevirtsim.Simulator

// The control plane and kubevirtsim live for the package; each sequence
// has its own namespace, Proxmox simulator and operator instances.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		ctx, cancel := context.WithCancel(context.Background())
		if err := hypervisorlab.InstallKubeVirt(ctx); err != nil {
			cancel()
			return nil, err
		}
		var err error
		if kvSim, err = kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()}); err != nil {
			cancel()
			return nil, err
		}
		return func() {
			cancel()
			kvSim.Stop()
		}, nil
	})
}
