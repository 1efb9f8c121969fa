// Package orphans deletes machines that carry this installation's ownership
// marks but whose MachineClaim no longer exists, and the cloud-init media
// left by machines that no longer exist — after a grace period, and never
// anything without this installation's marks (providers/installation.go).
//
// The sweeper is a leader-only runnable, not a kind's reconciler, but it has
// the same split: sweeper.go runs it, sweeper_phases.go does the work of one
// sweep, and sweeper_status.go holds its pure decision (which machines are
// orphans, and which to delete now) and what it reports (metrics, events).
package orphans

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
)

// Defaults of the sweeper's pacing.
const (
	DefaultInterval = time.Minute
	DefaultGrace    = 10 * time.Minute
	// DefaultParallel clusters are swept at once: a hung hypervisor holds
	// one of them, not the whole sweep.
	DefaultParallel = 4
	// DefaultClusterTimeout bounds one cluster's part of a sweep (its
	// listing, deletions and leftovers), so a hung hypervisor gives its
	// slot back and the sweep ends: at most one interval late.
	DefaultClusterTimeout = time.Minute
)

// Sweeper runs on the leader only.
type Sweeper struct {
	Client      client.Client
	Hypervisors *hypervisors.Registry
	// Operator are hypervisors of the operator's own, on no
	// HypervisorCluster (the KubeVirt the Cyberdesks' claims are made
	// on): swept as a cluster's are.
	Operator []OperatorHypervisor
	Recorder events.EventRecorder
	// Clock measures the grace; suites step a fake one instead of waiting.
	Clock clock.PassiveClock
	// Interval between sweeps (1 min); Grace an orphan must outlive (10 min).
	Interval, Grace time.Duration
	// Parallel bounds how many clusters are swept at once (DefaultParallel);
	// ClusterTimeout bounds each one's part (DefaultClusterTimeout).
	Parallel       int
	ClusterTimeout time.Duration

	mu sync.Mutex
	// firstSeen is when each orphan (by machineKey) was first seen.
	firstSeen map[string]time.Time
	// deleting holds orphans whose deletion was started but not yet seen
	// finished; they are counted once they are gone from the hypervisor.
	deleting map[string]deletion
	// reported holds the unmarked things already logged.
	reported map[string]bool
}

// OperatorHypervisor is a hypervisor of the operator's own, named as the
// status.clusterName of the claims made on it shows it.
type OperatorHypervisor struct {
	Name     string
	Provider providers.Hypervisor
	Type     hypervisorv1alpha1.ProviderType
}

// NeedLeaderElection: only the leader deletes.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// SetupWithManager adds the sweeper to mgr.
func (s *Sweeper) SetupWithManager(mgr ctrl.Manager) error {
	s.defaults()
	registerMetrics.Do(func() {
		metrics.Registry.MustRegister(orphansDeleted, orphansFound, orphansUnmarked, leftoversDeleted)
	})
	return mgr.Add(s)
}

func (s *Sweeper) defaults() {
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	if s.Interval == 0 {
		s.Interval = DefaultInterval
	}
	if s.Grace == 0 {
		s.Grace = DefaultGrace
	}
	if s.Parallel <= 0 {
		s.Parallel = DefaultParallel
	}
	if s.ClusterTimeout <= 0 {
		s.ClusterTimeout = DefaultClusterTimeout
	}
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
