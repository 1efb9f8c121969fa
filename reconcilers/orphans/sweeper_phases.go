package orphans

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ctrl "sigs.k8s.io/controller-runtime"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
)

// sweep is what one sweep has read and observed.
type sweep struct {
	now time.Time
	// live holds the UIDs of the MachineClaims that exist.
	live map[string]bool
	// seen holds the keys of the orphans this sweep saw and left standing.
	seen map[string]bool
	// listed holds the clusters whose machines this sweep could list.
	listed map[string]bool
	// orphans counts the orphans seen, by provider.
	orphans map[hypervisorv1alpha1.ProviderType]int
	// unmarked counts what was made before installations and is not ours
	// to decide on, by provider and kind.
	unmarked map[unmarkedKey]int
	// unmarkedSeen holds the keys of those, so each is logged once.
	unmarkedSeen map[string]bool
	deleted      int
	errs         []error
}

// deletion is an orphan whose deletion is under way.
type deletion struct {
	cluster *hypervisorv1alpha1.HypervisorCluster
	machine providers.Machine
}

// Sweep looks at every cluster once and deletes the orphans past their grace.
// It returns how many it deleted.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	s.defaults()
	var claims hypervisorv1alpha1.MachineClaimList
	// Only the UIDs are read: the cache's own objects, not a deep copy of
	// every claim each minute (24 MB of garbage at 10,000 claims).
	if err := s.Client.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	var clusters hypervisorv1alpha1.HypervisorClusterList
	if err := s.Client.List(ctx, &clusters); err != nil {
		return 0, err
	}
	w := &sweep{
		now: s.Clock.Now(), live: make(map[string]bool, len(claims.Items)),
		seen: map[string]bool{}, listed: map[string]bool{}, orphans: map[hypervisorv1alpha1.ProviderType]int{},
		unmarked: map[unmarkedKey]int{}, unmarkedSeen: map[string]bool{},
	}
	for _, c := range claims.Items {
		w.live[string(c.UID)] = true
	}
	targets := make([]target, 0, len(clusters.Items)+len(s.Operator))
	for i := range clusters.Items {
		targets = append(targets, target{cluster: &clusters.Items[i]})
	}
	for _, h := range s.Operator {
		// A stand-in cluster, never written: it names the hypervisor in
		// logs, metrics and the keys of what the sweep remembers.
		c := &hypervisorv1alpha1.HypervisorCluster{Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: h.Type}}
		c.Name = h.Name
		targets = append(targets, target{cluster: c, provider: h.Provider})
	}
	s.sweepClusters(ctx, w, targets)
	s.reportOrphans(w.orphans, w.unmarked)
	s.finishDeletions(w)
	s.forgetExcept(w.seen)
	s.forgetReportedExcept(w.unmarkedSeen)
	return w.deleted, errors.Join(w.errs...)
}

// sweepClusters sweeps the clusters at most Parallel at a time, each within
// ClusterTimeout: a hypervisor that accepts and never answers holds one
// slot until its deadline, and the other tenants' clusters are swept
// meanwhile. Each cluster records into its own part, merged when it ends.
func (s *Sweeper) sweepClusters(ctx context.Context, w *sweep, targets []target) {
	slots := make(chan struct{}, s.Parallel)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		cluster := t.cluster
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			w.errs = append(w.errs, ctx.Err())
			return
		}
		wg.Go(func() {
			defer func() { <-slots }()
			cctx, cancel := context.WithTimeout(ctx, s.ClusterTimeout)
			defer cancel()
			part := w.part()
			s.sweepCluster(cctx, part, cluster, t.provider)
			if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
				part.errs = append(part.errs, fmt.Errorf("sweeping HypervisorCluster %s: stopped at its deadline of %s: %w", clusterKey(cluster), s.ClusterTimeout, cctx.Err()))
			}
			mu.Lock()
			w.merge(part)
			mu.Unlock()
		})
	}
	wg.Wait()
}

// part is an empty record for one cluster's sweep, reading w's claims.
func (w *sweep) part() *sweep {
	return &sweep{
		now: w.now, live: w.live, seen: map[string]bool{}, listed: map[string]bool{},
		orphans: map[hypervisorv1alpha1.ProviderType]int{}, unmarked: map[unmarkedKey]int{}, unmarkedSeen: map[string]bool{},
	}
}

// merge adds a cluster's part to w.
func (w *sweep) merge(p *sweep) {
	maps.Copy(w.seen, p.seen)
	maps.Copy(w.listed, p.listed)
	maps.Copy(w.unmarkedSeen, p.unmarkedSeen)
	for k, n := range p.orphans {
		w.orphans[k] += n
	}
	for k, n := range p.unmarked {
		w.unmarked[k] += n
	}
	w.deleted += p.deleted
	w.errs = append(w.errs, p.errs...)
}

// target is one hypervisor to sweep: a HypervisorCluster's (provider nil:
// the registry's), or one of the operator's own.
type target struct {
	cluster  *hypervisorv1alpha1.HypervisorCluster
	provider providers.Hypervisor
}

// sweepCluster lists one cluster's machines and deletes its orphans past
// their grace.
func (s *Sweeper) sweepCluster(ctx context.Context, w *sweep, cluster *hypervisorv1alpha1.HypervisorCluster, p providers.Hypervisor) {
	log := ctrl.LoggerFrom(ctx).WithName("orphan-sweeper")
	if p == nil {
		var err error
		if p, err = s.Hypervisors.For(ctx, cluster); err != nil {
			return // the cluster's own status reports why
		}
	}
	machines, err := p.List(ctx)
	if err != nil {
		w.errs = append(w.errs, err)
		return
	}
	w.listed[clusterKey(cluster)] = true
	for _, m := range machines {
		switch judge(m, w.live) {
		case keep:
			continue
		case adopt:
			s.adopt(ctx, w, p, m)
			continue
		case unmarked:
			s.reportUnmarked(ctx, w, cluster, machineKey(cluster, m), KindMachine, m.Ref.String(), m.Owner.UID)
			continue
		case orphan:
		}
		w.orphans[cluster.Spec.Provider]++
		key := machineKey(cluster, m)
		w.seen[key] = true
		if !pastGrace(s.remember(key, w.now), w.now, s.Grace) {
			continue
		}
		log.Info("Deleting an orphaned machine", "cluster", cluster.Name, "machine", m.Ref.Name, "vmid", m.Ref.VMID, "ownerUID", m.Owner.UID)
		err := p.Delete(ctx, m.Ref, m.Owner)
		switch {
		case err == nil:
			w.deleted++
			s.counted(cluster, m)
			delete(w.seen, key)
		case errors.Is(err, providers.ErrInProgress):
			s.mu.Lock()
			if s.deleting == nil {
				s.deleting = map[string]deletion{}
			}
			s.deleting[key] = deletion{cluster: cluster, machine: m}
			s.mu.Unlock()
		default:
			w.errs = append(w.errs, err)
		}
	}
	s.sweepLeftovers(ctx, w, cluster, p)
}

// adopt marks a machine made before installations, whose claim is one of
// ours, as this installation's: from then on only this installation lists it.
func (s *Sweeper) adopt(ctx context.Context, w *sweep, p providers.Hypervisor, m providers.Machine) {
	marker, ok := p.(providers.InstallationMarker)
	if !ok {
		return
	}
	ctrl.LoggerFrom(ctx).WithName("orphan-sweeper").Info("Marking a machine made before installations as this installation's",
		"machine", m.Ref.String(), "ownerUID", m.Owner.UID)
	if err := marker.MarkInstallation(ctx, m.Ref, m.Owner); err != nil {
		w.errs = append(w.errs, err)
	}
}

// reportUnmarked counts something made before installations whose claim is
// not ours, and logs it the first time it is seen: it may be another
// installation's, so it is never deleted.
func (s *Sweeper) reportUnmarked(ctx context.Context, w *sweep, cluster *hypervisorv1alpha1.HypervisorCluster, key, kind, what, ownerUID string) {
	w.unmarked[unmarkedKey{provider: cluster.Spec.Provider, kind: kind}]++
	w.unmarkedSeen[key] = true
	s.mu.Lock()
	if s.reported == nil {
		s.reported = map[string]bool{}
	}
	first := !s.reported[key]
	s.reported[key] = true
	s.mu.Unlock()
	if first {
		ctrl.LoggerFrom(ctx).WithName("orphan-sweeper").Info(
			"Leaving alone something made before installations whose claim is not this installation's: delete it by hand if no installation uses it",
			"cluster", cluster.Name, "kind", kind, "what", what, "ownerUID", ownerUID)
	}
}

// sweepLeftovers deletes what a provider made beside machines that no
// longer exist (cloud-init ISOs and Secrets), after the same grace.
func (s *Sweeper) sweepLeftovers(ctx context.Context, w *sweep, cluster *hypervisorv1alpha1.HypervisorCluster, p providers.Hypervisor) {
	cleaner, ok := p.(providers.LeftoverCleaner)
	if !ok {
		return
	}
	leftovers, err := cleaner.Leftovers(ctx)
	if err != nil {
		w.errs = append(w.errs, err)
		return
	}
	for _, l := range leftovers {
		key := clusterKey(cluster) + "/" + l.Kind + "/" + l.ID
		if l.Installation == "" {
			s.reportUnmarked(ctx, w, cluster, key, l.Kind, l.ID, "")
			continue
		}
		w.seen[key] = true
		if !pastGrace(s.remember(key, w.now), w.now, s.Grace) {
			continue
		}
		ctrl.LoggerFrom(ctx).WithName("orphan-sweeper").Info("Deleting a leftover of a machine that no longer exists",
			"cluster", cluster.Name, "kind", l.Kind, "id", l.ID, "machine", l.Machine.String())
		if err := cleaner.DeleteLeftover(ctx, l); err != nil {
			w.errs = append(w.errs, err)
			continue
		}
		delete(w.seen, key)
		s.leftoverDeleted(cluster, l)
	}
}

// finishDeletions counts the deletions started earlier that no longer show
// in a listing.
func (s *Sweeper) finishDeletions(w *sweep) {
	s.mu.Lock()
	var done []deletion
	for _, key := range finished(s.deleting, w.seen, w.listed) {
		done = append(done, s.deleting[key])
		delete(s.deleting, key)
	}
	s.mu.Unlock()
	for _, d := range done {
		w.deleted++
		s.counted(d.cluster, d.machine)
	}
}

// remember returns when the orphan key was first seen, now if never.
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

// forgetReportedExcept forgets the unmarked things this sweep did not see,
// so one seen again is logged again.
func (s *Sweeper) forgetReportedExcept(seen map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.reported {
		if !seen[k] {
			delete(s.reported, k)
		}
	}
}

// forgetExcept forgets the orphans this sweep did not see standing: deleted,
// claimed again, or gone by other hands; seen again, their grace restarts.
func (s *Sweeper) forgetExcept(seen map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.firstSeen {
		if !seen[k] {
			delete(s.firstSeen, k)
		}
	}
}

func clusterKey(c *hypervisorv1alpha1.HypervisorCluster) string { return c.Namespace + "/" + c.Name }

func machineKey(c *hypervisorv1alpha1.HypervisorCluster, m providers.Machine) string {
	return clusterKey(c) + "/" + m.ProviderID
}
