package crd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// The real-world examples `hyperfleet-dev` does not apply (they need a real
// Proxmox or GitHub App) are what GitOps users copy, so the real API server's
// schema and CEL rules check them as they do the samples.
func TestEveryExampleIsAccepted(t *testing.T) {
	ns := testenv.Namespace(t)
	paths, err := filepath.Glob(filepath.Join("..", "..", "docs", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no examples under docs/examples/")
	}
	kinds := map[string]bool{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := manifests.Decode(path, data)
		if err != nil {
			t.Fatal(err)
		}
		if err := manifests.Apply(context.Background(), testenv.Client(), ns, "examples-test", objs); err != nil {
			t.Errorf("example %s refused: %v", path, err)
		}
		for _, o := range objs {
			kinds[o.GetKind()] = true
		}
	}
	for _, k := range []string{"HypervisorCluster", "HypervisorMachineTemplate", "MachineClaim", "RunnerPool"} {
		if !kinds[k] {
			t.Errorf("no example of kind %s", k)
		}
	}
}
