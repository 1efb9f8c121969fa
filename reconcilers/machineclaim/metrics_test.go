package machineclaim_test

import (
	"testing"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

func TestMetricsAreExportedFromRealCounts(t *testing.T) {
	l := newLab(t)
	l.claim("metered")
	l.waitPhase("metered", hypervisorv1alpha1.MachineReady, time.Minute)

	ready, ok := hypervisorlab.MetricValue(t, "hyperfleet_machines", map[string]string{"phase": "Ready", "provider": "proxmox"})
	if !ok || ready < 1 {
		t.Errorf("hyperfleet_machines{phase=Ready,provider=proxmox} = %v (found %v), want ≥ 1", ready, ok)
	}
	if n, _ := hypervisorlab.MetricValue(t, "hyperfleet_machine_provision_duration_seconds", map[string]string{"provider": "proxmox"}); n < 1 {
		t.Errorf("hyperfleet_machine_provision_duration_seconds has %v observations", n)
	}
	if n, _ := hypervisorlab.MetricValue(t, "hyperfleet_provider_requests_total", map[string]string{"provider": "proxmox", "operation": "vm_clone", "code": "200"}); n < 1 {
		t.Errorf("hyperfleet_provider_requests_total{operation=vm_clone,code=200} = %v", n)
	}
	if _, ok := hypervisorlab.MetricValue(t, "hyperfleet_provider_request_duration_seconds", map[string]string{"operation": "cluster_resources"}); !ok {
		t.Error("hyperfleet_provider_request_duration_seconds{operation=cluster_resources} missing")
	}
}
