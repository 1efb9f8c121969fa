package runnerpool

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// Runner states, the state label of hyperfleet_runners.
const (
	StatePending = "pending"
	StateIdle    = "idle"
	StateBusy    = "busy"
	// StateDeregistering: the VM is gone (or going) but GitHub still lists
	// the registration; it is retried until removed.
	StateDeregistering = "deregistering"
)

var (
	queueLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hyperfleet_runner_queue_latency_seconds",
		Help:    "Time from a workflow_job being queued to a runner taking it (its in_progress delivery), by pool.",
		Buckets: []float64{1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200},
	}, []string{"pool"})
	runnersDesc = prometheus.NewDesc("hyperfleet_runners",
		"Runners by pool and state (pending, idle, busy, deregistering), from each pool's last reconcile.", []string{"pool", "state"}, nil)
	registerOnce sync.Once
)

// counts holds each pool's last counted runners: the gauge is what the
// reconciler saw, never incremented or decremented.
type counts struct {
	mu   sync.Mutex
	pool map[types.NamespacedName]map[string]int
}

var runnerCounts = &counts{pool: map[types.NamespacedName]map[string]int{}}

func (c *counts) set(pool types.NamespacedName, byState map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if byState == nil {
		delete(c.pool, pool)
		return
	}
	c.pool[pool] = byState
}

// Forget drops a pool's counts, so the gauge stops reporting a pool that
// is gone; the driver calls it (Kind.Memory).
func (c *counts) Forget(pool types.NamespacedName) { c.set(pool, nil) }

func (c *counts) Describe(ch chan<- *prometheus.Desc) { ch <- runnersDesc }

func (c *counts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pool, byState := range c.pool {
		for _, state := range []string{StatePending, StateIdle, StateBusy, StateDeregistering} {
			ch <- prometheus.MustNewConstMetric(runnersDesc, prometheus.GaugeValue, float64(byState[state]), pool.String(), state)
		}
	}
}

func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(queueLatency, runnerCounts)
		runnerstate.RegisterMetrics()
	})
}
