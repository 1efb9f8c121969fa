// Package installations_test runs two installations of the operator — two
// managers, each with its own --installation-id and --namespaces — against
// one Proxmox simulator and one KubeVirt (kubevirtsim), as dev and prod
// sharing a hypervisor would.
package installations_test

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// The control plane and kubevirtsim are the package's; the managers are
// each test's, since their namespaces are.
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
		return func() {
			cancel()
			kvSim.Stop()
		}, nil
	})
}
