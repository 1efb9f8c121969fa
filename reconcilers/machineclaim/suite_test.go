package machineclaim_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// One manager, with every reconciler, runs against the package's control
// plane for all tests; each test has its own namespace and its own simulator.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		opts := manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: hypervisorlab.OperatorNamespace,
			ObserveInterval: time.Second, FinalizationTimeout: 8 * time.Second, MachineClaimClock: claimClock,
			OrphanSweepInterval: 500 * time.Millisecond, OrphanGrace: 2 * time.Second,
			// Claims need their cluster and template reconciled; the sweeper
			// finishes what a finalization deadline left behind.
			Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
				manager.ControllerMachineClaim, manager.ControllerOrphans},
		}
		// kubevirtsim runs until the teardown; the manager has its own stop
		// in testenv.StartManager.
		ctx, cancel := context.WithCancel(context.Background())
		var err error
		if err := hypervisorlab.InstallKubeVirt(ctx); err != nil {
			cancel()
			return nil, err
		}
		if kvSim, err = kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()}); err != nil {
			cancel()
			return nil, err
		}
		mgr, err := manager.New(testenv.Config(), opts)
		if err != nil {
			cancel()
			return nil, err
		}
		stopManager := testenv.StartManager(mgr)
		return func() {
			stopManager()
			cancel()
			kvSim.Stop()
		}, nil
	})
}

// claimClock is the MachineClaims' clock: real time plus what the tests
// stepped it by, so a claim's timeout or the finalization deadline passes
// when a test says so instead of being waited out.
var claimClock = &testenv.SteppedClock{}

// kvSim plays KubeVirt for the package's KubeVirt tests.
var kvSim *kubevirtsim.Simulator

// lab is one test's hypervisor as hypervisorlab makes it for every
// hypervisor suite, plus what only claims need.
type lab struct{ *hypervisorlab.Lab }

// newLab is a Proxmox simulator with its cluster "pve" and template "ubuntu".
func newLab(t *testing.T, opts ...hypervisorlab.Option) *lab {
	t.Helper()
	return &lab{hypervisorlab.Proxmox(t, opts...)}
}

func (l *lab) claim(name string, mutate ...func(*hypervisorv1alpha1.MachineClaim)) *hypervisorv1alpha1.MachineClaim {
	mc := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
	}
	for _, m := range mutate {
		m(mc)
	}
	l.Create(mc)
	return mc
}

// waitPhase waits for a claim's phase and returns the claim.
func (l *lab) waitPhase(name string, phase hypervisorv1alpha1.MachinePhase, timeout time.Duration) *hypervisorv1alpha1.MachineClaim {
	l.T.Helper()
	mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
	eventually.That(l.T, timeout, func() (bool, string) {
		if err := l.Get(mc); err != nil {
			return false, err.Error()
		}
		return mc.Status.Phase == phase, hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions)
	})
	return mc
}

func inNamespace(ns string) client.ListOption { return client.InNamespace(ns) }
