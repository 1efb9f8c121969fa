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
// owner's UID and this installation's mark (providers list no other
// installation's) and no MachineClaim with that UID exists; an orphan is
// deleted once it has been seen for the grace period, so a claim that is
// being created, or a listing that raced a claim's deletion, never costs a
// machine.
//
// A machine made before installations carries no installation mark: when
// its claim is one of ours it is marked as this installation's; otherwise
// it may be another installation's (not yet upgraded, or watching other
// namespaces), so it is reported and never deleted.

// verdict is what the sweeper does with one listed machine.
type verdict int

const (
	// keep: its claim exists, or it carries no owner (not HyperFleet's).
	keep verdict = iota
	// orphan: this installation's, and its claim is gone.
	orphan
	// adopt: unmarked, and its claim is one of ours: mark it.
	adopt
	// unmarked: unmarked, and its claim is not ours: report, never delete.
	unmarked
)

func judge(m providers.Machine, live map[string]bool) verdict {
	switch {
	case m.Owner.UID == "":
		return keep
	case live[m.Owner.UID] && m.Installation == "":
		return adopt
	case live[m.Owner.UID]:
		return keep
	case m.Installation == "":
		return unmarked
	}
	return orphan
}

// IsOrphan reports whether the sweeper deletes m (after its grace): a
// machine of this installation whose MachineClaim (a UID in live) is gone.
// A deleting HypervisorCluster waits for these, since the sweeper can reach
// them only while the cluster exists.
func IsOrphan(m providers.Machine, live map[string]bool) bool { return judge(m, live) == orphan }

// KindMachine is the kind label of unmarked machines in
// hyperfleet_orphans_unmarked; leftovers use their provider's kind
// ("cloudinit-iso", "cloudinit-secret").
const KindMachine = "machine"

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
	orphansUnmarked = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hyperfleet_orphans_unmarked",
		Help: "Machines (kind machine) and cloud-init media made before installations, with no installation mark, whose MachineClaim is not one of this installation's, as of the last sweep: the sweeper never deletes them; a person decides.",
	}, []string{"provider", "kind"})
	leftoversDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_leftovers_deleted_total",
		Help: "Things made beside a machine (cloud-init ISOs and Secrets) deleted by the sweeper because their machine no longer exists.",
	}, []string{"provider", "kind"})
	registerMetrics sync.Once
)

// reportOrphans sets the orphan gauge of every provider the registry can
// build, zero for those with none, so a provider's gauge falls back to zero
// once its orphans are gone.
func (s *Sweeper) reportOrphans(orphans map[hypervisorv1alpha1.ProviderType]int, unmarked map[unmarkedKey]int) {
	for _, prov := range s.Hypervisors.Providers() {
		orphansFound.WithLabelValues(string(prov)).Set(float64(orphans[prov]))
	}
	// Kinds come and go with what was found; the reset drops the gone ones.
	orphansUnmarked.Reset()
	for _, prov := range s.Hypervisors.Providers() {
		orphansUnmarked.WithLabelValues(string(prov), KindMachine).Set(0)
	}
	for k, n := range unmarked {
		orphansUnmarked.WithLabelValues(string(k.provider), k.kind).Set(float64(n))
	}
}

// unmarkedKey counts unmarked things by provider and kind.
type unmarkedKey struct {
	provider hypervisorv1alpha1.ProviderType
	kind     string
}

// leftoverDeleted records one leftover deleted: the metric and an event on
// its cluster.
func (s *Sweeper) leftoverDeleted(cluster *hypervisorv1alpha1.HypervisorCluster, l providers.Leftover) {
	leftoversDeleted.WithLabelValues(string(cluster.Spec.Provider), l.Kind).Inc()
	s.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, "LeftoverDeleted", "Sweep",
		"Deleted %s %s: its machine %s no longer exists", l.Kind, l.ID, l.Machine.String())
}

// counted records one orphan deleted: the metric and an event on its cluster.
func (s *Sweeper) counted(cluster *hypervisorv1alpha1.HypervisorCluster, m providers.Machine) {
	orphansDeleted.WithLabelValues(string(cluster.Spec.Provider)).Inc()
	s.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, "OrphanDeleted", "Sweep",
		"Deleted machine %s (%s): its MachineClaim (UID %s) no longer exists", m.Ref.Name, m.ProviderID, m.Owner.UID)
}
