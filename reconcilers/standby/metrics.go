package standby

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// Outcomes of a standby machine's idle time.
const (
	// OutcomeTaken: a claim took the machine; its idle time bought a fast start.
	OutcomeTaken = "taken"
	// OutcomeRetired: the machine was retired (its age, a smaller
	// spec.standby.hot, a new template generation) without serving a claim.
	OutcomeRetired = "retired"
)

var idleSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "hyperfleet_standby_idle_machine_seconds_total",
	Help: "Seconds standby machines were Ready with no claim on them, counted when each was taken or retired: what standby capacity costs. Divided by hyperfleet_standby_binds_total, the idle machine-seconds per claim served.",
}, []string{"provider", "outcome"})

var register sync.Once

// RegisterMetrics registers the standby metrics with controller-runtime's
// registry, once, whichever reconciler asks first.
func RegisterMetrics() { register.Do(func() { metrics.Registry.MustRegister(idleSeconds) }) }

// CountIdle adds the time standby claim sb was Ready and free, up to now
// (or to its expiry, for one that ended at its age), to the idle count.
func CountIdle(sb *hypervisorv1alpha1.MachineClaim, now time.Time, outcome string) {
	ready := sb.Status.ReadyTime
	if ready == nil {
		return
	}
	end := now
	if exp := sb.Status.ExpiryTime; exp != nil && exp.Time.Before(now) {
		end = exp.Time
	}
	if end.After(ready.Time) {
		idleSeconds.WithLabelValues(string(sb.Status.Provider), outcome).Add(end.Sub(ready.Time).Seconds())
	}
}
