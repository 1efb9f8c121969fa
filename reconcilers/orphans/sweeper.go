// Package orphans deletes machines that carry HyperFleet's ownership marks but
// whose MachineClaim no longer exists — after a grace period, and never a
// machine without our marks.
package orphans

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
)

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

// Sweeper runs on the leader only.
type Sweeper struct {
	Client      client.Client
	Hypervisors *hypervisors.Registry
	Recorder    events.EventRecorder
	Clock       clock.PassiveClock
	// Interval between sweeps (1 min); Grace an orphan must outlive (10 min).
	Interval, Grace time.Duration

	mu        sync.Mutex
	firstSeen map[string]time.Time
	// deleting holds orphans whose deletion was started but not yet seen
	// finished; they are counted once they are gone from the hypervisor.
	deleting map[string]deletion
}

type deletion struct {
	cluster *hypervisorv1alpha1.HypervisorCluster
	machine providers.Machine
}

// NeedLeaderElection: only the leader deletes.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// SetupWithManager adds the sweeper to mgr.
func (s *Sweeper) SetupWithManager(mgr ctrl.Manager) error {
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	if s.Interval == 0 {
		s.Interval = time.Minute
	}
	if s.Grace == 0 {
		s.Grace = 10 * time.Minute
	}
	registerMetrics.Do(func() { metrics.Registry.MustRegister(orphansDeleted, orphansFound) })
	return mgr.Add(s)
}

// Start sweeps every Interval until ctx ends.
func (s *Sweeper) Start(ctx context.Context) error {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if _, err := s.Sweep(ctx); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Sweeping for orphaned machines")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep looks at every cluster once and deletes the orphans past their grace.
// It returns how many it deleted.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	log := ctrl.LoggerFrom(ctx).WithName("orphan-sweeper")
	var claims hypervisorv1alpha1.MachineClaimList
	if err := s.Client.List(ctx, &claims); err != nil {
		return 0, err
	}
	live := make(map[string]bool, len(claims.Items))
	for _, c := range claims.Items {
		live[string(c.UID)] = true
	}
	var clusters hypervisorv1alpha1.HypervisorClusterList
	if err := s.Client.List(ctx, &clusters); err != nil {
		return 0, err
	}
	now := s.Clock.Now()
	seen := map[string]bool{}
	deleted := 0
	var errs []error
	orphans := map[string]int{}
	listed := map[string]bool{}
	for i := range clusters.Items {
		cluster := &clusters.Items[i]
		p, err := s.Hypervisors.For(ctx, cluster)
		if err != nil {
			continue // the cluster's own status reports why
		}
		machines, err := p.List(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		listed[cluster.Namespace+"/"+cluster.Name] = true
		for _, m := range machines {
			if m.Owner.UID == "" || live[m.Owner.UID] {
				continue
			}
			orphans[string(cluster.Spec.Provider)]++
			key := cluster.Namespace + "/" + cluster.Name + "/" + m.ProviderID
			seen[key] = true
			first := s.remember(key, now)
			if now.Sub(first) < s.Grace {
				continue
			}
			log.Info("Deleting an orphaned machine", "cluster", cluster.Name, "machine", m.Ref.Name, "vmid", m.Ref.VMID, "ownerUID", m.Owner.UID)
			err := p.Delete(ctx, m.Ref, m.Owner)
			switch {
			case err == nil:
				deleted++
				s.counted(cluster, m)
				delete(seen, key)
			case errors.Is(err, providers.ErrInProgress):
				s.mu.Lock()
				if s.deleting == nil {
					s.deleting = map[string]deletion{}
				}
				s.deleting[key] = deletion{cluster: cluster, machine: m}
				s.mu.Unlock()
			default:
				errs = append(errs, err)
			}
		}
	}
	for _, prov := range []hypervisorv1alpha1.ProviderType{hypervisorv1alpha1.ProviderProxmox, hypervisorv1alpha1.ProviderKubeVirt} {
		orphansFound.WithLabelValues(string(prov)).Set(float64(orphans[string(prov)]))
	}
	// Deletions started earlier that no longer show in a listing are done.
	s.mu.Lock()
	var finished []deletion
	for key, d := range s.deleting {
		if !seen[key] && listed[d.cluster.Namespace+"/"+d.cluster.Name] {
			finished = append(finished, d)
			delete(s.deleting, key)
		}
	}
	s.mu.Unlock()
	for _, d := range finished {
		deleted++
		s.counted(d.cluster, d.machine)
	}
	s.forgetExcept(seen)
	return deleted, errors.Join(errs...)
}

// counted records one orphan deleted: the metric and an event on its cluster.
func (s *Sweeper) counted(cluster *hypervisorv1alpha1.HypervisorCluster, m providers.Machine) {
	orphansDeleted.WithLabelValues(string(cluster.Spec.Provider)).Inc()
	s.Recorder.Eventf(cluster, nil, corev1.EventTypeNormal, "OrphanDeleted", "Sweep",
		"Deleted machine %s (%s): its MachineClaim (UID %s) no longer exists", m.Ref.Name, m.ProviderID, m.Owner.UID)
}

func (s *Sweeper) remember(key string, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstSeen == nil {
		s.firstSeen = map[string]time.Time{}
	}
	if t, ok := s.firstSeen[key]; ok {
		return t
	}
	s.firstSeen[key] = now
	return now
}

func (s *Sweeper) forgetExcept(seen map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.firstSeen {
		if !seen[k] {
			delete(s.firstSeen, k)
		}
	}
}
