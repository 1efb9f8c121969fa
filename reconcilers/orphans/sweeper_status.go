package orphans

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
)

// The sweeper's decision, pure: a machine is an orphan when it carries an
// owner's UID (our marks) and no MachineClaim with that UID exists; an
// orphan is deleted once it has been seen for the grace period, so a claim
// that is being created, or a listing that raced a claim's deletion, never
// costs a machine.

// isOrphan reports whether m is ours and its claim is gone. A machine
// without an owner UID is not HyperFleet's and is never touched.
func isOrphan(m providers.Machine, live map[string]bool) bool {
	return m.Owner.UID != "" && !live[m.Owner.UID]
}

// pastGrace reports whether an orphan first seen at firstSeen may be
// deleted at now.
func pastGrace(firstSeen, now time.Time, grace time.Duration) bool {
	return now.Sub(firstSeen) >= grace
}

// finished returns, sorted, the deletions in flight that are done: the
// orphan no longer shows in a listing of its cluster. A cluster that could
// not be listed this sweep says nothing about its deletions.
func finished(deleting map[string]deletion, seen, listed map[string]bool) []string {
	var out []string
	for key, d := range deleting {
		if !seen[key] && listed[clusterKey(d.cluster)] {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

var (
	orphansDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_orphans_deleted_total",
		Help: "Machines deleted by the orphan sweeper because their MachineClaim no longer exists.",
	}, []string{"provider"})
	orphansFound = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hyperfleet_orphans",
		Help: "Machines owned by HyperFleet whose MachineClaim does not exist, as of the last sweep.",
	}, []string{"provider"})
	registerMetrics sync.Once
)

// reportOrphans sets the orphan gauge of every provider the registry can
// build, zero for those with none, so a provider's gauge falls back to zero
// once its orphans are gone.
func (s *Sweeper) reportOrphans(orphans map[hypervisorv1alpha1.ProviderType]int) {
	for _, prov := range s.Hypervisors.Providers() {
		orphansFound.WithLabelValues(string(prov)).Set(float64(orphans[prov]))
	}
}

// counted records one orphan deleted: the metric and an event on its cluster.
func (s *Sweeper) counted(cluster *hypervisorv1alpha1.HypervisorCluster, m providers.Machine) {
	orphansDeleted.WithLabelValues(string(cluster.Spec.Provider)).Inc()
	s.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, "OrphanDeleted", "Sweep",
		"Deleted machine %s (%s): its MachineClaim (UID %s) no longer exists", m.Ref.Name, m.ProviderID, m.Owner.UID)
}
