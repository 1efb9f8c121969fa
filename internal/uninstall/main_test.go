package uninstall_test

import (
	"bytes"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/installtest"
)

// root is the repository, seen from this package's folder.
const root = "../.."

// The suite runs on a whole cluster: its kube-controller-manager runs the
// namespace controller and the garbage collector, so a deleted namespace
// really finishes terminating — or really stays Terminating.
func TestMain(m *testing.M) {
	testenv.MainWith(m, testcluster.Around(testenv.Config, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		return func() {}, nil
	}))
}

// steps is docs/uninstall.md's command blocks.
func steps(t *testing.T) installtest.Doc {
	t.Helper()
	return installtest.ReadDoc(t, root, "docs/uninstall.md")
}

// installation is the rendered base applied to the test cluster, and the
// operator running in this process as the base's ServiceAccount, with the
// base's RBAC and the Deployment's flags.
type installation struct {
	*installtest.Installation
	// released is the output of the last release-finalizers.
	released bytes.Buffer
}

// install waits for a previous installation's Namespace and CRDs to be
// gone, applies the base server-side (the Namespace and CRDs first, as
// Argo CD's sync wave and Flux do) and starts the operator.
func install(t *testing.T) *installation {
	t.Helper()
	objs, err := gitops.Build(root, gitops.BaseDir)
	if err != nil {
		t.Fatal(err)
	}
	in := &installation{Installation: installtest.New(t, "uninstall-test")}
	in.Apply(objs, installtest.FirstByKind)
	in.StartOperator()
	return in
}
