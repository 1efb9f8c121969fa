package performers

import (
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
)

// tracker records, per Performer, when its Pod and Service were first seen,
// when its Pod turned Ready and when the Performer said Ready, from watches
// on the API server; it closes a channel when every one of n got there.
type tracker struct {
	n     int
	start time.Time

	mu                               sync.Mutex
	pod, svc, served, podReady, perf map[string]time.Time
	allServed, allPodReady, allReady chan struct{}
}

func newTracker(n int) *tracker {
	return &tracker{
		n:   n,
		pod: map[string]time.Time{}, svc: map[string]time.Time{}, served: map[string]time.Time{},
		podReady: map[string]time.Time{}, perf: map[string]time.Time{},
		allServed: make(chan struct{}), allPodReady: make(chan struct{}), allReady: make(chan struct{}),
	}
}

// first records name's first time in m and closes done when m holds n.
func (t *tracker) first(m map[string]time.Time, name string, at time.Time, done chan struct{}) {
	if _, seen := m[name]; seen || name == "" {
		return
	}
	m[name] = at
	if len(m) == t.n {
		close(done)
	}
}

func (t *tracker) onPod(pod *corev1.Pod, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name := pod.Labels[performer.LabelPerformer]
	t.first(t.pod, name, at, make(chan struct{}))
	t.servedIf(name, at)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			t.first(t.podReady, name, at, t.allPodReady)
		}
	}
}

func (t *tracker) onService(svc *corev1.Service, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	name := svc.Labels[performer.LabelPerformer]
	t.first(t.svc, name, at, make(chan struct{}))
	t.servedIf(name, at)
}

// servedIf: a Performer is served once both its Pod and Service exist.
func (t *tracker) servedIf(name string, at time.Time) {
	_, pod := t.pod[name]
	_, svc := t.svc[name]
	if pod && svc {
		t.first(t.served, name, at, t.allServed)
	}
}

func (t *tracker) onPerformer(p *hourglassv1alpha1.Performer, at time.Time) {
	if apimeta.IsStatusConditionTrue(p.Status.Conditions, meta.ReadyCondition) {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.first(t.perf, p.Name, at, t.allReady)
	}
}

// percentile is the p-th percentile (0-100) of the times since start in m.
func (t *tracker) percentile(m map[string]time.Time, p float64) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(m) == 0 {
		return 0
	}
	ds := make([]time.Duration, 0, len(m))
	for _, at := range m {
		ds = append(ds, at.Sub(t.start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(p / 100 * float64(len(ds)-1))
	return ds[i]
}

// progress says how far the run got, for a wait that ran out.
func (t *tracker) progress() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("of %d: Pods %d, Services %d, served %d, Pods Ready %d, Performers Ready %d",
		t.n, len(t.pod), len(t.svc), len(t.served), len(t.podReady), len(t.perf))
}
