package executor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/executor"
)

// reads counts the reads the reconciler sends past the cache (its
// APIReader), by namespace.
var reads = &readCounter{byNamespace: map[string][]string{}}

type readCounter struct {
	mu          sync.Mutex
	byNamespace map[string][]string
}

func (c *readCounter) wrap(r client.Reader) client.Reader { return countingReader{Reader: r, count: c} }

func (c *readCounter) add(ns, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byNamespace[ns] = append(c.byNamespace[ns], what)
}

func (c *readCounter) in(ns string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.byNamespace[ns]...)
}

type countingReader struct {
	client.Reader
	count *readCounter
}

// kind names what is read: a metadata-only read by its kind.
func kind(obj any) string {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return m.Kind
	}
	return fmt.Sprintf("%T", obj)
}

func (r countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.count.add(key.Namespace, fmt.Sprintf("GET %s %s", kind(obj), key.Name))
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	r.count.add(o.Namespace, fmt.Sprintf("LIST %T", list))
	return r.Reader.List(ctx, list, opts...)
}

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
	for _, r := range reads.in(e.ns) {
		if !strings.HasPrefix(r, "GET Secret operator-keys") {
			t.Errorf("read past the cache: %s; want only the keys Secret's metadata", r)
		}
	}
}
