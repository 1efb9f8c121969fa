//go:build hourglass

package manager

import (
	"flag"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/hyperfleet/hyperfleet/internal/scheme"
)

// The Hourglass build runs the Hourglass reconcilers only: it refuses the
// others by name, saying which build holds them; it knows no KubeVirt
// type and has none of the machines' or runners' flags.
func TestTheHourglassBuildHoldsOnlyHourglass(t *testing.T) {
	if err := checkControllers([]string{ControllerHourglass}); err != nil {
		t.Errorf("--controllers=hourglass: %v", err)
	}
	for _, name := range []string{ControllerMachineClaim, ControllerRunnerPool, ControllerCyberdesk} {
		err := checkControllers([]string{name})
		if err == nil || !strings.Contains(err.Error(), "not in this build") || !strings.Contains(err.Error(), "full hyperfleet build") {
			t.Errorf("--controllers=%s: %v; want a refusal naming the full build", name, err)
		}
	}
	vm := schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"}
	if scheme.New().Recognizes(vm) {
		t.Error("the Hourglass build's scheme holds KubeVirt's VirtualMachine")
	}
	var o Options
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	o.BindFlags(fs)
	for _, f := range []string{"webhook-bind-address", "spire-admin-socket", "cyberdesk-template-configmap"} {
		if fs.Lookup(f) != nil {
			t.Errorf("the Hourglass build has --%s", f)
		}
	}
	for _, f := range []string{"workers", "controllers", "leader-elect"} {
		if fs.Lookup(f) == nil {
			t.Errorf("the Hourglass build lacks --%s", f)
		}
	}
}
