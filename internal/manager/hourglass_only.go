//go:build hourglass

package manager

import (
	"flag"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// The Hourglass build (go build -tags hourglass) holds the Hourglass
// reconcilers (HourglassExecutor, Performer) and nothing of the machines,
// desktops and runners: no Proxmox, KubeVirt, GitHub or SPIRE client is
// linked. An operator's resident set follows the breadth of its code more
// than its cache (docs/performance.md: a peak of 57.6–58.9 MiB against
// 73.4 MiB at 1,000 Performers), so an installation that runs only
// Performers runs this build. The option types below keep Options' shape; their flags do
// not exist here.

// AllControllers lists the reconcilers of this build.
var AllControllers = []string{ControllerHourglass}

// CyberdeskOptions, RunnerOptions and AttestationOptions configure kinds
// this build does not hold.
type (
	CyberdeskOptions   struct{}
	RunnerOptions      struct{}
	AttestationOptions struct{}
)

func (*CyberdeskOptions) bindFlags(*flag.FlagSet)   {}
func (*CyberdeskOptions) complete([]string) error   { return nil }
func (*RunnerOptions) bindFlags(*flag.FlagSet)      {}
func (*AttestationOptions) bindFlags(*flag.FlagSet) {}
func (*AttestationOptions) complete() error         { return nil }

// setupReconcilers registers the Hourglass reconcilers, the only ones of
// this build.
func setupReconcilers(mgr ctrl.Manager, o Options) error {
	if o.runs(ControllerHourglass) {
		return setupHourglass(mgr, o)
	}
	return nil
}

// kubeVirtServed: this build has no KubeVirt rules to apply.
func kubeVirtServed(apimeta.RESTMapper) (bool, error) { return false, nil }

func kubeVirtCacheRules(*cache.Options, *interner) {}

func (*interner) kubeVirt(any) {}
