package hypervisormachinetemplate

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

var standbyDesc = prometheus.NewDesc("hyperfleet_standby_machines",
	"Standby machines of the templates, by state (hot: Ready and free; warm: cloned, powered off and free; starting: being made; binding: taken and being handed over) and provider, summed from the templates' status.standby at scrape time.",
	[]string{"state", "provider"}, nil)

// standbyCollector sums the templates' status.standby at every scrape:
// counts written by the reconciler, read from the cache, so it never
// drifts across restarts. Templates (not namespaces or names) are summed,
// so a tenant's choice of names adds no series.
type standbyCollector struct{ reader client.Reader }

func (c standbyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- standbyDesc }

func (c standbyCollector) Collect(ch chan<- prometheus.Metric) {
	var list hypervisorv1alpha1.HypervisorMachineTemplateList
	if err := c.reader.List(context.Background(), &list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	type key struct{ state, provider string }
	sums := map[key]int32{}
	for i := range list.Items {
		t := &list.Items[i]
		st := t.Status.Standby
		if st == nil {
			continue
		}
		p := string(t.Status.Provider)
		sums[key{"hot", p}] += st.Hot
		sums[key{"warm", p}] += st.Warm
		sums[key{"starting", p}] += st.Starting
		sums[key{"binding", p}] += st.Binding
	}
	for k, v := range sums {
		ch <- prometheus.MustNewConstMetric(standbyDesc, prometheus.GaugeValue, float64(v), k.state, k.provider)
	}
}
