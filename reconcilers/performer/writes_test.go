package performer_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// writes counts the writes the suite's manager (the reconciler and its
// event recorder) sends to the API server, by namespace: each test has its
// own, so a test reads what its Performers cost.
var writes = &writeCounter{byNamespace: map[string][]string{}, detail: map[string][]string{}}

type writeCounter struct {
	mu          sync.Mutex
	byNamespace map[string][]string
	detail      map[string][]string
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		switch req.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			return rt.RoundTrip(req)
		}
		_, rest, ok := strings.Cut(req.URL.Path, "/namespaces/")
		if !ok {
			return rt.RoundTrip(req)
		}
		ns, rest, _ := strings.Cut(rest, "/")
		var body []byte
		if req.GetBody != nil {
			if rc, err := req.GetBody(); err == nil {
				body, _ = io.ReadAll(rc)
				_ = rc.Close()
			}
		}
		resp, err := rt.RoundTrip(req)
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		w.mu.Lock()
		w.byNamespace[ns] = append(w.byNamespace[ns], req.Method+" "+rest)
		w.detail[ns] = append(w.detail[ns], fmt.Sprintf("%s %s -> %d %s", req.Method, rest, code, body))
		w.mu.Unlock()
		return resp, err
	})
}

// in is what was written in ns so far: "PATCH performers/x/status" and so on.
func (w *writeCounter) in(ns string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.byNamespace[ns]...)
}

// bodies are the same writes with their answers and bodies, for a failure
// to show what changed.
func (w *writeCounter) bodies(ns string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.detail[ns], "\n")
}

// reads counts the reads the reconciler sends past the cache (its
// APIReader), by namespace.
var reads = testenv.NewReads()

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// settle wakes the Performer's reconciler through its Pod (an annotation,
// as the kubelet's next report would) and waits until the performer
// controller has finished a reconcile since, with nothing queued or in
// flight: what a write count read after it holds every write that wake-up
// caused.
func (e *env) settle(pod string) {
	e.t.Helper()
	before := performerMetric(e.t, "controller_runtime_reconcile_total")
	e.annotatePod(pod, "test.hyperfleet.io/nudge", time.Now().Format(time.RFC3339Nano))
	eventually.That(e.t, 20*time.Second, func() (bool, string) {
		total := performerMetric(e.t, "controller_runtime_reconcile_total")
		depth := performerMetric(e.t, "workqueue_depth")
		active := performerMetric(e.t, "controller_runtime_active_workers")
		return total > before && depth == 0 && active == 0, fmt.Sprintf("reconciles %v (before the nudge %v), queued %v, in flight %v", total, before, depth, active)
	})
}

// performerMetric sums a controller-runtime metric over the performer
// controller's series.
func performerMetric(t *testing.T, name string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			ours := false
			for _, l := range m.GetLabel() {
				if (l.GetName() == "controller" || l.GetName() == "name") && l.GetValue() == "performer" {
					ours = true
				}
			}
			if ours {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// A Performer costs four writes from nothing to Ready: its Pod, its
// Service and its status once they exist (one pass), then its status once
// Ready; the first Performer of a namespace also makes the namespace's
// NetworkPolicy (one for all of them). The steps between (the Pod bound, waiting for its kubelet) and a
// reconcile with nothing new write nothing, and neither does a first start
// as an event. Nor does it cost a read past the cache: the Pod, the Service
// and the policy are created, which the API server refuses for a name
// already taken, so no read is needed to keep off someone else's.
func TestWritesPerPerformer(t *testing.T) {
	e := newEnv(t)
	e.performer("counted", hold)
	pod := e.waitPod("counted", 20*time.Second, func(p corev1.Pod) bool { return p.Spec.NodeName != "" })
	e.settle(pod.Name)
	served := []string{"POST pods", "POST networkpolicies", "POST services", "PATCH performers/counted/status"}
	if got := writes.in(e.ns); !sameWrites(got, served) {
		t.Errorf("writes until served (the Pod bound, not started) = %q, want %q", got, served)
	}
	if got := reads.In(e.ns); len(got) > 0 {
		t.Errorf("reads past the cache until served = %q, want none", got)
	}

	e.release(pod.Name)
	e.waitReason("counted", "Serving", 20*time.Second)
	e.settle(pod.Name)
	ready := append(served, "PATCH performers/counted/status")
	if got := writes.in(e.ns); !sameWrites(got, ready) {
		t.Errorf("writes until Ready = %q, want %q", got, ready)
	}
	if got := reads.In(e.ns); len(got) > 0 {
		t.Errorf("reads past the cache until Ready = %q, want none", got)
	}

	// Idle: reconciles with nothing new write nothing.
	e.settle(pod.Name)
	e.settle(pod.Name)
	if got := writes.in(e.ns); len(got) != len(ready) {
		t.Errorf("writes while idle: %q", got[len(ready):])
	}

	// The namespace's next Performer finds its policy made: three writes
	// to served, four to Ready.
	e.performer("next", hold)
	next := e.waitPod("next", 20*time.Second, func(p corev1.Pod) bool { return p.Spec.NodeName != "" })
	e.settle(next.Name)
	nextServed := []string{"POST pods", "POST services", "PATCH performers/next/status"}
	if got := writes.in(e.ns)[len(ready):]; !sameWrites(got, nextServed) {
		t.Errorf("the second Performer's writes until served = %q, want %q", got, nextServed)
	}
	e.release(next.Name)
	e.waitReason("next", "Serving", 20*time.Second)
	e.settle(next.Name)
	if got := writes.in(e.ns)[len(ready):]; !sameWrites(got, append(nextServed, "PATCH performers/next/status")) {
		t.Errorf("the second Performer's writes until Ready = %q", got)
	}
	if got := reads.In(e.ns); len(got) > 0 {
		t.Errorf("reads past the cache until the second Performer is Ready = %q, want none", got)
	}
	if t.Failed() {
		t.Logf("the writes:\n%s", writes.bodies(e.ns))
	}
}

// sameWrites compares two write lists as multisets.
func sameWrites(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	count := map[string]int{}
	for _, w := range want {
		count[w]++
	}
	for _, g := range got {
		if count[g]--; count[g] < 0 {
			return false
		}
	}
	return true
}
