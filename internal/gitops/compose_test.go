package gitops_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// Every overlay composes with every component: enabled in the overlay's own
// list, each component's flags reach the manager beside the base's (an
// overlay never replaces args), the flags parse as `hyperfleet run` parses
// them, and the whole build applies on a real API server holding the ESO and
// prometheus-operator CRDs.
func TestOverlaysComposeWithEveryComponent(t *testing.T) {
	comps, err := gitops.Components(root)
	if err != nil {
		t.Fatal(err)
	}
	// The namespaced component binds the manager in the namespaces it is
	// given, which an overlay's namespace: would move into the operator's
	// own; it is for an overlay without one, and TestNamespacedInstallation
	// builds and runs it that way.
	// The hourglass-only component replaces the manager's arguments for
	// the Hourglass build, which has no webhook receiver and no other kind
	// for the other components' flags; TestHourglassOnlyComponent builds it.
	comps = slices.DeleteFunc(comps, func(c string) bool { return c == gitops.NamespacedDir || c == gitops.HourglassOnlyDir })
	if len(comps) < 5 {
		t.Fatalf("only %d components found: %v", len(comps), comps)
	}
	_, base := managerContainer(t, built(t, gitops.BaseDir))
	// A component's flags: what it adds to the base's.
	added := map[string][]string{}
	for _, comp := range comps {
		_, c := managerContainer(t, built(t, gitops.BaseDir, comp))
		for _, a := range c.Args {
			if !slices.Contains(base.Args, a) {
				added[comp] = append(added[comp], a)
			}
		}
	}
	for _, env := range gitops.Overlays {
		t.Run(env, func(t *testing.T) {
			objs, err := gitops.BuildOverlayWith(root, env, comps...)
			if err != nil {
				t.Fatal(err)
			}
			_, c := managerContainer(t, objs)
			for _, a := range base.Args {
				if !slices.Contains(c.Args, a) && !isOverridden(a, c.Args) {
					t.Errorf("the base's %s is missing: args %v", a, c.Args)
				}
			}
			for _, comp := range comps {
				for _, a := range added[comp] {
					if !slices.Contains(c.Args, a) {
						t.Errorf("%s's %s is missing: args %v", comp, a, c.Args)
					}
				}
			}
			parseRunFlags(t, c.Args)
			for _, u := range objs {
				if u.GetKind() == "Namespace" {
					createNamespace(t, decode[corev1.Namespace](t, u))
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, u := range objs {
				if err := apply(ctx, testenv.Client(), u.DeepCopy(), true); err != nil {
					t.Errorf("%s: %v", gitops.ID(u), err)
				}
			}
		})
	}
}

// isOverridden reports whether args set flag a's name to another value: an
// overlay changes a flag by adding it again (the last one wins), as
// overlays/dev does with --log-level.
func isOverridden(a string, args []string) bool {
	name, _, ok := strings.Cut(a, "=")
	if !ok {
		return false
	}
	for _, b := range args {
		if n, _, ok := strings.Cut(b, "="); ok && n == name {
			return true
		}
	}
	return false
}
