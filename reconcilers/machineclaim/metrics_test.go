package machineclaim_test

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// metricValue sums the samples of name whose labels include want, from the
// registry the manager's /metrics endpoint serves.
func metricValue(t *testing.T, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total, found := 0.0, false
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			found = true
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return total, found
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func TestMetricsAreExportedFromRealCounts(t *testing.T) {
	l := newLab(t)
	l.claim("metered")
	l.waitPhase("metered", hypervisorv1alpha1.MachineReady, time.Minute)

	ready, ok := metricValue(t, "hyperfleet_machines", map[string]string{"phase": "Ready", "provider": "proxmox"})
	if !ok || ready < 1 {
		t.Errorf("hyperfleet_machines{phase=Ready,provider=proxmox} = %v (found %v), want ≥ 1", ready, ok)
	}
	if n, _ := metricValue(t, "hyperfleet_machine_provision_duration_seconds", map[string]string{"provider": "proxmox"}); n < 1 {
		t.Errorf("hyperfleet_machine_provision_duration_seconds has %v observations", n)
	}
	if n, _ := metricValue(t, "hyperfleet_provider_requests_total", map[string]string{"provider": "proxmox", "operation": "vm_clone", "code": "200"}); n < 1 {
		t.Errorf("hyperfleet_provider_requests_total{operation=vm_clone,code=200} = %v", n)
	}
	if _, ok := metricValue(t, "hyperfleet_provider_request_duration_seconds", map[string]string{"operation": "cluster_resources"}); !ok {
		t.Error("hyperfleet_provider_request_duration_seconds{operation=cluster_resources} missing")
	}
}
