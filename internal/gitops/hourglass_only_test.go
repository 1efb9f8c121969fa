package gitops_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// The hourglass-only component applies to the base: the manager runs the
// Hourglass reconcilers, without the webhook receiver's flags, which the
// Hourglass build does not have (cmd/hyperfleet checks the build takes
// every argument). Listed before namespaced, both sets of arguments stay.
func TestHourglassOnlyComponent(t *testing.T) {
	const dir = gitops.HourglassOnlyDir
	_, container := managerContainer(t, built(t, gitops.BaseDir, dir))
	args := container.Args
	if len(args) == 0 || args[0] != "run" || !slices.Contains(args, "--controllers=hourglass") {
		t.Fatalf("manager arguments %q: want run with --controllers=hourglass", args)
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--webhook-") {
			t.Errorf("manager argument %s: the Hourglass build has no webhook receiver", a)
		}
	}
	opts := parseRunFlags(t, args)
	if len(opts.Controllers) != 1 || opts.Controllers[0] != "hourglass" {
		t.Errorf("--controllers = %v, want hourglass alone", opts.Controllers)
	}
	_, container = managerContainer(t, built(t, gitops.BaseDir, dir, gitops.NamespacedDir))
	if opts := parseRunFlags(t, container.Args); len(opts.Controllers) != 1 || len(opts.Namespaces) != 1 {
		t.Errorf("with namespaced after it: --controllers %v, --namespaces %v; want both", opts.Controllers, opts.Namespaces)
	}
}
