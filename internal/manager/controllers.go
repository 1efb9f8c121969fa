package manager

import (
	"fmt"
	"slices"
	"strings"
)

// The reconcilers a manager can run, by the name --controllers takes. Each
// name registers one reconciler, or a group that only works together (the
// Hourglass pair; RunnerPools with their webhook receiver).
const (
	ControllerHypervisorCluster         = "hypervisorcluster"
	ControllerHypervisorMachineTemplate = "hypervisormachinetemplate"
	ControllerMachineClaim              = "machineclaim"
	ControllerOrphans                   = "orphans"
	ControllerRunnerPool                = "runnerpool"
	ControllerCyberdesk                 = "cyberdesk"
	ControllerHourglass                 = "hourglass"
)

// everyController lists every name of the full build, in the order they
// are registered; AllControllers those of this build.
var everyController = []string{
	ControllerHypervisorCluster, ControllerHypervisorMachineTemplate, ControllerMachineClaim, ControllerOrphans,
	ControllerCyberdesk, ControllerRunnerPool, ControllerHourglass,
}

// runs reports whether the manager runs the named reconciler: every one
// when Controllers is empty or "*", as kube-controller-manager's
// --controllers does.
func (o *Options) runs(name string) bool {
	return len(o.Controllers) == 0 || slices.Contains(o.Controllers, "*") || slices.Contains(o.Controllers, name)
}

func checkControllers(names []string) error {
	for _, n := range names {
		if n != "*" && !slices.Contains(AllControllers, n) {
			if slices.Contains(everyController, n) {
				return fmt.Errorf("--controllers: %q is not in this build, which holds only %s; run the full hyperfleet build for it", n, strings.Join(AllControllers, ", "))
			}
			return fmt.Errorf("--controllers: unknown controller %q; known: *, %s", n, strings.Join(AllControllers, ", "))
		}
	}
	o := Options{Controllers: names}
	if o.runs(ControllerCyberdesk) && !o.runs(ControllerMachineClaim) {
		// Its desks would wait for ever on claims nobody makes.
		return fmt.Errorf("--controllers: %s needs %s (a desk's VM is its MachineClaim's machine); add %s", ControllerCyberdesk, ControllerMachineClaim, ControllerMachineClaim)
	}
	return nil
}
