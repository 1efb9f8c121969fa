package runnerstate

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// deregistrationFailures is counted by the pool (orphans, its deletion)
// and by the runners' reconciler (retirements) alike: one series per pool.
var (
	deregistrationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_runner_deregistration_failures_total",
		Help: "Attempts to remove a runner's GitHub registration that failed (they are retried), by pool.",
	}, []string{"pool"})
	registerOnce sync.Once
)

// RegisterMetrics registers the runner metrics both reconcilers count.
func RegisterMetrics() {
	registerOnce.Do(func() { metrics.Registry.MustRegister(deregistrationFailures) })
}

// DeregistrationFailed counts a failed attempt to remove one of pool's
// registrations.
func DeregistrationFailed(pool types.NamespacedName) {
	deregistrationFailures.WithLabelValues(pool.String()).Inc()
}
