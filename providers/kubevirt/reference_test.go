package kubevirt

import (
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/providers"
)

// A VirtualMachine is named for its owner and needs no number; a taken
// name has no alternative.
func TestReference(t *testing.T) {
	p := &Provider{}
	owner := providers.Owner{UID: "u", Namespace: "ci", Name: "Runner_1"}
	if ref := p.Reference(owner); ref.Name != "hf-ci-runner-1" || ref.VMID != 0 || ref.Namespace != "ci" {
		t.Errorf("reference %+v", ref)
	}
	if _, ok := p.NextReference(owner, p.Reference(owner)); ok {
		t.Error("a taken name offered an alternative")
	}
	long := providers.MachineName(providers.Owner{Namespace: strings.Repeat("n", 40), Name: strings.Repeat("m", 40)})
	if len(long) > 63 || long == providers.MachineName(providers.Owner{Namespace: strings.Repeat("n", 40), Name: strings.Repeat("m", 41)}) {
		t.Errorf("long names: %q", long)
	}
}
