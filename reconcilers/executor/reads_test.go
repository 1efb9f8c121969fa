package executor_test

import (
	"strings"
	"testing"
	"time"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/executor"
)

// reads counts the reads the reconciler sends past the cache (its
// APIReader), by namespace.
var reads = testenv.NewReads()

// A new executor's ConfigMap and Deployment are created without a read
// past the cache (a create is refused for a name already taken, so none is
// needed to keep off someone else's), nor do the reconciles after read
// them while nothing changes. The keys Secret's metadata is the one read
// past it: the operator caches no Secret of an executor's namespace.
func TestNewExecutorReadsPastTheCacheOnlyTheKeys(t *testing.T) {
	e := newEnv(t)
	e.create(keysSecret("operator-keys", true))
	e.create(testExecutor("fresh", hold))
	e.waitReason("fresh", executor.ReasonRollingOut)
	// A look more, with nothing changed.
	e.updateExecutor("fresh", func(x *hourglassv1alpha1.HourglassExecutor) {
		if x.Annotations == nil {
			x.Annotations = map[string]string{}
		}
		x.Annotations["example.com/touched"] = "true"
	})
	time.Sleep(2 * time.Second)
	for _, r := range reads.In(e.ns) {
		if !strings.HasPrefix(r, "GET Secret operator-keys") {
			t.Errorf("read past the cache: %s; want only the keys Secret's metadata", r)
		}
	}
}
