package bench

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Follow watches list's kind in ns and hands every added or changed object
// to on, with when it arrived, until ctx ends. A watch the server closes
// is opened again; a watch without a resourceVersion starts with every
// object that exists, so a reopened one misses nothing but the moment of a
// change in between (callers keep the first time they saw a state).
// opened, if not nil, is closed once the first watch is open.
func Follow(ctx context.Context, c client.WithWatch, list client.ObjectList, ns string, on func(obj any, at time.Time), opened chan<- struct{}) {
	var once sync.Once
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, list, client.InNamespace(ns))
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if opened != nil {
			once.Do(func() { close(opened) })
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				on(ev.Object, time.Now())
			}
		}
		w.Stop()
	}
}
