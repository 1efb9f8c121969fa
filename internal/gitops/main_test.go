package gitops_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// root is the repository, seen from this package's folder.
const root = "../.."

func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		return func() {}, testenv.InstallThirdPartyCRDs()
	})
}

// apply applies obj server-side, as a dry run or for real.
func apply(ctx context.Context, c client.Client, obj *unstructured.Unstructured, dryRun bool) error {
	opts := []client.ApplyOption{client.ForceOwnership, client.FieldOwner("hyperfleet-gitops-test")}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), opts...)
}

var (
	buildsMu sync.Mutex
	builds   = map[string][]*unstructured.Unstructured{}
)

// built is gitops.Build (or BuildWith, given components) once per package
// run; callers get their own copies.
func built(t *testing.T, dir string, components ...string) []*unstructured.Unstructured {
	t.Helper()
	key := strings.Join(append([]string{dir}, components...), "+")
	buildsMu.Lock()
	objs, ok := builds[key]
	buildsMu.Unlock()
	if !ok {
		var err error
		if len(components) == 0 {
			objs, err = gitops.Build(root, dir)
		} else {
			objs, err = gitops.BuildWith(root, dir, components...)
		}
		if err != nil {
			t.Fatal(err)
		}
		buildsMu.Lock()
		builds[key] = objs
		buildsMu.Unlock()
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, u := range objs {
		out[i] = u.DeepCopy()
	}
	return out
}
