package cyberdesk

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// The Cyberdesk operator's five series, with the names and meaning its
// dashboards and alerts already use.
var (
	vmCreated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cyberdesk_vm_created_total",
		Help: "VirtualMachines created for Cyberdesks.",
	})
	vmDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cyberdesk_vm_deleted_total",
		Help: "VirtualMachines of Cyberdesks deleted (timeout, guest shutdown, failure or Cyberdesk deletion).",
	})
	vmTimeout = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cyberdesk_vm_timeout_total",
		Help: "Cyberdesk VMs shut down because their timeoutMs ran out.",
	})
	operationDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cyberdesk_operation_duration_seconds",
		Help:    "Duration of Cyberdesk operations: create (the VM and its Secret), delete, timeout (shutdown at expiry) and reconcile.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"operation"})
	activeDesc = prometheus.NewDesc("cyberdesk_active_vm_count",
		"Cyberdesks whose VM exists now (Provisioning, Running or Stopping), counted at scrape time.", nil, nil)
)

// activeCollector counts from the cache at every scrape: a real count that
// survives restarts, never a ±1 gauge. The reader is swapped when a new
// manager starts (tests restart the operator in one process).
type activeCollector struct {
	mu     sync.Mutex
	reader client.Reader
}

var (
	active       = &activeCollector{}
	registerOnce sync.Once
)

func registerMetrics(reader client.Reader) {
	active.mu.Lock()
	active.reader = reader
	active.mu.Unlock()
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(vmCreated, vmDeleted, vmTimeout, operationDuration, active)
	})
}

func (c *activeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- activeDesc }

func (c *activeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader := c.reader
	c.mu.Unlock()
	if reader == nil {
		return
	}
	var list cyberdeskv1alpha1.CyberdeskList
	if err := reader.List(context.Background(), &list); err != nil {
		return
	}
	n := 0
	for i := range list.Items {
		if hasVM(&list.Items[i]) {
			n++
		}
	}
	ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(n))
}

// hasVM: the desk's VM exists (or is being made or removed).
func hasVM(d *cyberdeskv1alpha1.Cyberdesk) bool {
	switch d.Status.Phase {
	case cyberdeskv1alpha1.CyberdeskProvisioning, cyberdeskv1alpha1.CyberdeskRunning, cyberdeskv1alpha1.CyberdeskStopping:
		return true
	}
	return false
}

var standbyDesc = prometheus.NewDesc("cyberdesk_standby_vm_count",
	"Hot desk machines (--cyberdesk-standby) by namespace and state (hot: Ready and free; starting: being made; binding: taken by a desk and being handed over), counted from the cache at scrape time.",
	[]string{"namespace", "state"}, nil)

// standbyCollector counts the desk standby claims at every scrape.
type standbyCollector struct {
	mu      sync.Mutex
	reader  client.Reader
	standby Standby
}

var (
	standbyCounts       = &standbyCollector{}
	registerStandbyOnce sync.Once
)

func registerStandbyMetrics(reader client.Reader, s Standby) {
	standbyCounts.mu.Lock()
	standbyCounts.reader, standbyCounts.standby = reader, s
	standbyCounts.mu.Unlock()
	standby.RegisterMetrics()
	registerStandbyOnce.Do(func() { metrics.Registry.MustRegister(standbyCounts) })
}

func (c *standbyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- standbyDesc }

func (c *standbyCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	reader, cfg := c.reader, c.standby
	c.mu.Unlock()
	if reader == nil {
		return
	}
	var list hypervisorv1alpha1.MachineClaimList
	if err := reader.List(context.Background(), &list, client.MatchingLabels{standby.TemplateLabel: StandbyTemplate}); err != nil {
		return
	}
	byNamespace := map[string]*[3]int{}
	for ns := range cfg.Hot {
		byNamespace[ns] = &[3]int{}
	}
	for i := range list.Items {
		sb := &list.Items[i]
		n := byNamespace[sb.Namespace]
		if n == nil {
			n = &[3]int{}
			byNamespace[sb.Namespace] = n
		}
		_, bound := standby.BoundTo(sb)
		switch {
		case !sb.DeletionTimestamp.IsZero():
		case bound:
			n[2]++
		case cfg.free(sb):
			n[0]++
		default:
			n[1]++
		}
	}
	for ns, n := range byNamespace {
		for i, state := range []string{"hot", "starting", "binding"} {
			ch <- prometheus.MustNewConstMetric(standbyDesc, prometheus.GaugeValue, float64(n[i]), ns, state)
		}
	}
}
