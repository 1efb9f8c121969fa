package attestation

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// Sweeper removes from SPIRE what a machine left behind when its claim's
// own cleanup could not (SPIRE down while the claim was deleted, an
// operator crash between the two): every entry, token alias and agent of
// this installation whose MachineClaim no longer exists. Leader only.
type Sweeper struct {
	Registry *Registry
	// Reader lists the claims (the manager's cache).
	Reader client.Reader
	// Interval between sweeps; Grace is how long a machine must be seen
	// without its claim before it is forgotten, so a claim the cache has
	// not yet shown is never swept.
	Interval, Grace time.Duration
	// TrustDomain of the operator's default server; the servers templates
	// named are swept too, once the registry has dialled them.
	TrustDomain string

	seen map[string]time.Time // machine ID → first seen without a claim
}

func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start sweeps every Interval until ctx ends.
func (s *Sweeper) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("attestation-sweeper")
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := s.Sweep(ctx, time.Now())
		if err != nil {
			log.Error(err, "Sweeping SPIRE for machines without a claim failed; retrying at the next sweep")
		}
		if n > 0 {
			log.Info("Removed SPIRE entries and agents of machines whose claim is gone", "machines", n)
		}
	}
}

// Sweep forgets the machines seen without a claim for Grace, and returns
// how many.
func (s *Sweeper) Sweep(ctx context.Context, now time.Time) (int, error) {
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	var claims hypervisorv1alpha1.MachineClaimList
	if err := s.Reader.List(ctx, &claims); err != nil {
		return 0, err
	}
	live := make(map[string]bool, len(claims.Items))
	for i := range claims.Items {
		c := &claims.Items[i]
		live[string(c.UID)] = true
		if st := c.Status.Attestation; st != nil {
			// A machine taken from standby keeps the identity it attested
			// with, its standby claim's: alive while its taker is.
			if m, _, err := spire.ParseID(st.SPIFFEID); err == nil {
				live[m.UID] = true
			}
		}
	}
	servers, err := s.Registry.dialled(ctx, s.TrustDomain)
	if err != nil {
		return 0, err
	}
	orphans := map[string]orphan{}
	var firstErr error
	for _, server := range servers {
		entries, err := server.ListEntries(ctx)
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		for _, e := range entries {
			m, _, err := spire.ParseID(e.SPIFFEID)
			if err != nil || m.Kind != MachineKind || live[m.UID] {
				continue
			}
			orphans[m.String()] = orphan{machine: m, server: server}
		}
	}
	forgotten := 0
	for _, id := range slices.Sorted(maps.Keys(orphans)) {
		first, ok := s.seen[id]
		if !ok {
			s.seen[id] = now
			continue
		}
		if now.Sub(first) < s.Grace {
			continue
		}
		o := orphans[id]
		if err := o.server.ForgetMachine(ctx, o.machine); err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		delete(s.seen, id)
		forgotten++
	}
	for id := range s.seen {
		if _, still := orphans[id]; !still {
			delete(s.seen, id) // its claim showed up, or it went
		}
	}
	return forgotten, firstErr
}

type orphan struct {
	machine spire.MachineID
	server  spire.Server
}
