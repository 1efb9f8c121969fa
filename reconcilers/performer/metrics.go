package performer

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

var (
	podRecreations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_performer_pod_recreations_total",
		Help: "Performer Pods replaced because they failed (reason Failed) or stayed Pending too long (reason PendingTimeout).",
	}, []string{"reason"})
	performersDesc = prometheus.NewDesc("hyperfleet_performers",
		"Performers by phase, counted from the cache at scrape time.", []string{"phase"}, nil)
)

// performersCollector sets hyperfleet_performers from real counts at every
// scrape, so it cannot drift the way ±1 gauges do across restarts.
type performersCollector struct{ reader client.Reader }

func (c performersCollector) Describe(ch chan<- *prometheus.Desc) { ch <- performersDesc }

func (c performersCollector) Collect(ch chan<- prometheus.Metric) {
	var list hourglassv1alpha1.PerformerList
	if err := c.reader.List(context.Background(), &list); err != nil {
		return
	}
	counts := map[hourglassv1alpha1.PerformerPhase]int{}
	for _, phase := range []hourglassv1alpha1.PerformerPhase{hourglassv1alpha1.PerformerPending, hourglassv1alpha1.PerformerRunning,
		hourglassv1alpha1.PerformerUpgrading, hourglassv1alpha1.PerformerFailed, hourglassv1alpha1.PerformerTerminating} {
		counts[phase] = 0
	}
	for _, p := range list.Items {
		phase := p.Status.Phase
		if phase == "" {
			phase = hourglassv1alpha1.PerformerPending
		}
		counts[phase]++
	}
	for phase, n := range counts {
		ch <- prometheus.MustNewConstMetric(performersDesc, prometheus.GaugeValue, float64(n), string(phase))
	}
}
