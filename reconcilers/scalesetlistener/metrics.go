package scalesetlistener

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
)

var (
	sessionOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hyperfleet_scaleset_session_open",
		Help: "1 while the leader holds the scale set's message session, 0 otherwise, by pool.",
	}, []string{"pool"})
	sessionFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_scaleset_session_failures_total",
		Help: "Times a scale set's message session was lost or refused (it is opened again), by pool.",
	}, []string{"pool"})
	assignedJobs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hyperfleet_scaleset_assigned_jobs",
		Help: "GitHub's statistics.totalAssignedJobs for the pool's scale set: the jobs it must serve.",
	}, []string{"pool"})
	lastMessage = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hyperfleet_scaleset_last_message_timestamp_seconds",
		Help: "When the scale set's session last answered with statistics (Unix seconds), by pool.",
	}, []string{"pool"})
	registerOnce sync.Once
)

// RegisterMetrics registers the listeners' metrics.
func RegisterMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(sessionOpen, sessionFailures, assignedJobs, lastMessage)
	})
}

func sessionState(pool types.NamespacedName, s scaleset.SessionState) {
	v := 0.0
	if s == scaleset.SessionOpen {
		v = 1
	}
	sessionOpen.WithLabelValues(pool.String()).Set(v)
}

func forgetMetrics(pool types.NamespacedName) {
	for _, g := range []*prometheus.GaugeVec{sessionOpen, assignedJobs, lastMessage} {
		g.DeleteLabelValues(pool.String())
	}
	sessionFailures.DeleteLabelValues(pool.String())
}
