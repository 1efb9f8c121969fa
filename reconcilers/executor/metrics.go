package executor

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// Executor metrics. The replica gauges are read from the cache at every
// scrape, so they are right after a restart and a deleted executor's series
// disappear with it; the rollout counter counts what this process saw.
var (
	desiredDesc = prometheus.NewDesc("hyperfleet_executor_replicas_desired",
		"Replicas an HourglassExecutor asks for (spec.replicas).", []string{"executor_namespace", "executor"}, nil)
	availableDesc = prometheus.NewDesc("hyperfleet_executor_replicas_available",
		"Available replicas of an HourglassExecutor's Deployment (status.availableReplicas).", []string{"executor_namespace", "executor"}, nil)
	configRollouts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_executor_config_rollouts_total",
		Help: "Configuration changes that rolled an HourglassExecutor's Deployment.",
	}, []string{"executor_namespace", "executor"})
)

// replicaCollector reports the replica gauges from the cache. The reader is
// swapped when a new manager starts (tests restart the operator in one
// process).
type replicaCollector struct {
	mu     sync.Mutex
	reader client.Reader
}

var (
	replicas     = &replicaCollector{}
	registerOnce sync.Once
)

func registerMetrics(reader client.Reader) {
	replicas.mu.Lock()
	replicas.reader = reader
	replicas.mu.Unlock()
	registerOnce.Do(func() { metrics.Registry.MustRegister(replicas, configRollouts) })
}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- desiredDesc
	ch <- availableDesc
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader := c.reader
	c.mu.Unlock()
	if reader == nil {
		return
	}
	var list hourglassv1alpha1.HourglassExecutorList
	if err := reader.List(context.Background(), &list); err != nil {
		return
	}
	for i := range list.Items {
		e := &list.Items[i]
		want := defaultReplicas
		if e.Spec.Replicas != nil {
			want = *e.Spec.Replicas
		}
		ch <- prometheus.MustNewConstMetric(desiredDesc, prometheus.GaugeValue, float64(want), e.Namespace, e.Name)
		ch <- prometheus.MustNewConstMetric(availableDesc, prometheus.GaugeValue, float64(e.Status.AvailableReplicas), e.Namespace, e.Name)
	}
}
