package memory

import (
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// No manager runs in this process: the benchmark starts the operator's own
// binary, so the resident set it reports is the operator's alone, not the
// test's clients and simulators.
func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard()) // kubevirtsim's informers log through it
	testenv.Main(m)
}
