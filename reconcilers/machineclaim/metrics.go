package machineclaim

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

var (
	provisionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hyperfleet_machine_provision_duration_seconds",
		Help:    "Time from a MachineClaim's creation to its machine being Ready.",
		Buckets: []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200},
	}, []string{"provider"})
	finalizerDeadlineExceeded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_finalizer_deadline_exceeded_total",
		Help: "MachineClaims released after their finalization deadline with the machine possibly left for the orphan sweeper.",
	}, []string{"provider"})
	standbyBinds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_standby_binds_total",
		Help: "MachineClaims that took a standby machine of their template instead of making one.",
	}, []string{"provider"})
	standbyMisses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_standby_misses_total",
		Help: "MachineClaims that fit a template's standby machines but found none free, and took the cold path.",
	}, []string{"provider"})
	machinesDesc = prometheus.NewDesc("hyperfleet_machines",
		"MachineClaims by phase and provider, counted from the cache at scrape time.", []string{"phase", "provider"}, nil)
)

// machinesCollector sets hyperfleet_machines from real counts at every
// scrape, so it never drifts the way ±1 gauges do across restarts.
// The providers are the registry's, so a new provider is counted without
// an edit here.
type machinesCollector struct {
	reader    client.Reader
	providers []hypervisorv1alpha1.ProviderType
}

func (c machinesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- machinesDesc }

func (c machinesCollector) Collect(ch chan<- prometheus.Metric) {
	var list hypervisorv1alpha1.MachineClaimList
	// Read-only counting: the cache's objects, not a copy of every claim at
	// every scrape.
	if err := c.reader.List(context.Background(), &list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	type key struct{ phase, provider string }
	counts := map[key]int{}
	for _, p := range []hypervisorv1alpha1.MachinePhase{hypervisorv1alpha1.MachinePending, hypervisorv1alpha1.MachineProvisioning,
		hypervisorv1alpha1.MachineWarm, hypervisorv1alpha1.MachineRunning, hypervisorv1alpha1.MachineReady, hypervisorv1alpha1.MachineStopping,
		hypervisorv1alpha1.MachineTerminated, hypervisorv1alpha1.MachineFailed} {
		for _, prov := range c.providers {
			counts[key{string(p), string(prov)}] = 0
		}
	}
	for _, mc := range list.Items {
		phase := mc.Status.Phase
		if phase == "" {
			phase = hypervisorv1alpha1.MachinePending
		}
		counts[key{string(phase), string(mc.Status.Provider)}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(machinesDesc, prometheus.GaugeValue, float64(n), k.phase, k.provider)
	}
}
