package testenv

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reads counts the reads a reconciler sends past the cache (its
// APIReader), by namespace: "GET *v1.Service performer-x", "LIST
// *v1.PodList", a metadata-only read by its kind.
type Reads struct {
	mu          sync.Mutex
	byNamespace map[string][]string
}

// NewReads returns an empty count.
func NewReads() *Reads { return &Reads{byNamespace: map[string][]string{}} }

// Wrap returns r, counting each read into c.
func (c *Reads) Wrap(r client.Reader) client.Reader { return countingReader{Reader: r, count: c} }

// In is what was read in ns so far.
func (c *Reads) In(ns string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.byNamespace[ns]...)
}

func (c *Reads) add(ns, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byNamespace[ns] = append(c.byNamespace[ns], what)
}

type countingReader struct {
	client.Reader
	count *Reads
}

func readKind(obj any) string {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return m.Kind
	}
	return fmt.Sprintf("%T", obj)
}

func (r countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.count.add(key.Namespace, fmt.Sprintf("GET %s %s", readKind(obj), key.Name))
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	r.count.add(o.Namespace, fmt.Sprintf("LIST %T", list))
	return r.Reader.List(ctx, list, opts...)
}
