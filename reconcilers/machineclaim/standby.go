package machineclaim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// take gives a claim that fits (standby.Fits) a standby machine of its
// template instead of a clone, and finishes a hand-over a crash cut short.
// On a standby claim that was taken it holds everything back: the machine
// is the taking claim's from the bind on.
func (r *Reconciler) take(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	if standby.IsStandby(c) {
		return r.holdBound(ctx, s)
	}
	if c.Status.BoundFrom != nil {
		return r.handOver(ctx, s)
	}
	if c.Status.MachineName != "" || r.started(c) || s.template == nil {
		return skeleton.Continue(), nil
	}
	hot, _ := standby.Fits(c, s.template)
	warm, _ := standby.FitsWarm(c, s.template)
	if !hot && !warm {
		return skeleton.Continue(), nil
	}
	if _, ok := s.provider.(providers.OwnerChanger); !ok {
		return skeleton.Continue(), nil
	}
	sb, free, err := r.candidates(ctx, s, func(sb *hypervisorv1alpha1.MachineClaim) bool {
		if standby.IsWarm(sb) {
			return warm
		}
		return hot
	})
	if err != nil {
		return skeleton.Stop(), err
	}
	if sb == nil && len(free) > 0 {
		if took, err := r.tookAlready(ctx, s); err != nil {
			return skeleton.Stop(), err
		} else if took {
			return r.take(ctx, s) // on with the machine it has, as stored
		}
		if sb, err = r.bind(ctx, s, free); err != nil {
			return skeleton.Stop(), err
		}
	}
	if sb == nil {
		standbyMisses.WithLabelValues(string(c.Status.Provider)).Inc()
		return skeleton.Continue(), nil
	}
	standbyBinds.WithLabelValues(string(c.Status.Provider)).Inc()
	standby.CountIdle(sb, s.now, standby.OutcomeTaken)
	c.Status.MachineName, c.Status.VMID, c.Status.Node = sb.Status.MachineName, sb.Status.VMID, sb.Status.Node
	c.Status.ProviderID, c.Status.AssignedAddress = sb.Status.ProviderID, sb.Status.AssignedAddress
	c.Status.BoundFrom = &hypervisorv1alpha1.StandbyOrigin{Name: sb.Name, UID: sb.UID}
	what, instead := "standby machine", "making one"
	if standby.IsWarm(sb) {
		// Never booted: the provision path configures it with this
		// claim's spec and boots it, once it is handed over.
		what, instead = "warm machine", "cloning one; configuring and booting it"
	} else {
		c.Status.Addresses = append([]hypervisorv1alpha1.MachineAddress(nil), sb.Status.Addresses...)
		if st := sb.Status.Attestation; st != nil {
			// The machine proved its identity as the standby claim's
			// machine; that identity is now the claim's, and the
			// credential endpoint hands the claim's credentials to it
			// (attestation.Endpoint).
			c.Status.Attestation = &hypervisorv1alpha1.MachineAttestationStatus{Phase: st.Phase, Method: st.Method,
				SPIFFEID: st.SPIFFEID, TokenExpiryTime: st.TokenExpiryTime, AttestedTime: st.AttestedTime}
		}
		// Running already: the clone path (provision) is never taken.
		start := metav1.NewTime(s.now)
		c.Status.StartTime = &start
	}
	s.progress = "took " + what + " " + sb.Status.MachineName
	if err := r.checkpoint(ctx, s); err != nil {
		return skeleton.Stop(), err
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "TookStandby", "Provision",
		"Took %s %s of template %s (from %s) instead of %s", what, c.Status.MachineName, s.template.Name, sb.Name, instead)
	// Handed over in this reconcile: the next one reads the claim from a
	// cache that may not show the record yet, and would take it again
	// (measured: 128 binds for 100 jobs when the hand-over was requeued).
	return r.handOver(ctx, s)
}

// tookAlready reads the claim as stored and reports whether it holds a
// machine already; if so, the stored status becomes the reconcile's
// (adopt). The cache may not yet show what the claim recorded a moment
// ago: a claim that took a standby machine and is reconciled again at once
// (the standby claim's deletion, its Secret's hand-over, a requeue) read
// itself without it, found that machine's standby claim deleted and took a
// second one, and the first machine's agent found no claim holding it
// (measured: in 3 of 9 bursts of 100 jobs on 100 hot machines, 3 to 10
// machines were lost so, and as many jobs waited for a clone). One GET per
// claim about to bind, only when a standby machine is free: a claim that
// finds none (a burst bigger than the hot count) pays nothing more.
func (r *Reconciler) tookAlready(ctx context.Context, s *scope) (bool, error) {
	stored := &hypervisorv1alpha1.MachineClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.claim), stored); err != nil {
		return false, fmt.Errorf("reading the claim as stored before it takes a standby machine: %w", err)
	}
	st := stored.Status
	if stored.UID != s.claim.UID || st.MachineName == "" && st.BoundFrom == nil && st.StartTime == nil {
		return false, nil
	}
	adopt(s, stored)
	return true, nil
}

// candidates finds the standby claim bound to this claim already (a
// reconcile that bound one and then failed to record it), or else the free
// ones that fit, in the order to try them: hot before warm, oldest first.
func (r *Reconciler) candidates(ctx context.Context, s *scope, fits func(*hypervisorv1alpha1.MachineClaim) bool) (mine *hypervisorv1alpha1.MachineClaim, free []*hypervisorv1alpha1.MachineClaim, err error) {
	c := s.claim
	var list hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(c.Namespace),
		client.MatchingLabels{standby.TemplateLabel: s.template.Name}); err != nil {
		return nil, nil, fmt.Errorf("listing the standby machines of template %s: %w", s.template.Name, err)
	}
	// What this process bound for the claim, in case the cache does not
	// show it yet.
	remembered, _ := r.bound.Load(c)
	free = make([]*hypervisorv1alpha1.MachineClaim, 0, len(list.Items))
	for i := range list.Items {
		sb := &list.Items[i]
		b, bound := standby.BoundTo(sb)
		mine := bound && b.UID == c.UID
		if !mine && sb.UID == remembered.uid {
			mine, b = true, standby.Binding{At: remembered.at}
		}
		if mine {
			// Recorded only while young: older, its standby claim may
			// be undoing it (standby.BindGrace); it is left to.
			if s.now.Sub(b.At) < standby.RecordWithin && sb.Status.MachineName != "" && sb.DeletionTimestamp.IsZero() {
				return sb, nil, nil
			}
			continue
		}
		if fits(sb) && standby.Free(sb, s.template) {
			free = append(free, sb)
		}
	}
	standby.Oldest(free)
	// Hot before warm: a hot machine spares the boot too.
	slices.SortStableFunc(free, func(a, b *hypervisorv1alpha1.MachineClaim) int {
		return cmp.Compare(b2i(standby.IsWarm(a)), b2i(standby.IsWarm(b)))
	})
	return nil, free, nil
}

// bind binds the first of free no other claim wins first: the
// resourceVersion precondition lets exactly one claim win each. nil: every
// one went to another claim.
func (r *Reconciler) bind(ctx context.Context, s *scope, free []*hypervisorv1alpha1.MachineClaim) (*hypervisorv1alpha1.MachineClaim, error) {
	c := s.claim
	for _, sb := range free {
		if !r.binding.reserve(sb.UID) {
			continue // another worker of this process binds it, or did a moment ago
		}
		patch := client.MergeFromWithOptions(sb.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if sb.Annotations == nil {
			sb.Annotations = map[string]string{}
		}
		sb.Annotations[standby.BoundToAnnotation] = standby.Value(c, s.now)
		err := r.Client.Patch(ctx, sb, patch)
		switch {
		case err == nil:
			r.bound.Store(c, binding{uid: sb.UID, at: s.now})
			return sb, nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// Another claim took it, or it went: try the next.
			continue
		default:
			r.binding.release(sb.UID)
			return nil, fmt.Errorf("binding standby claim %s: %w", sb.Name, err)
		}
	}
	return nil, nil
}

// handOver makes the machine the claim recorded from a standby claim its
// own on the hypervisor, then deletes the standby claim, whose finalizer
// then finds nothing of its own to delete. Each step is idempotent, so a
// crash anywhere is finished by the next reconcile.
func (r *Reconciler) handOver(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	from := c.Status.BoundFrom
	changer, ok := s.provider.(providers.OwnerChanger)
	if !ok {
		return r.providerError(s, providers.Permanent("OwnerChangeUnsupported",
			fmt.Sprintf("the %s provider cannot hand machine %s over from standby claim %s", c.Status.Provider, c.Status.MachineName, from.Name), nil))
	}
	prev := providers.Owner{UID: string(from.UID), Namespace: c.Namespace, Name: from.Name}
	err := changer.ChangeOwner(ctx, machineRef(c), prev, owner(c))
	if errors.Is(err, providers.ErrNotFound) {
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "MachineGone", "Observe", "Standby machine %s disappeared before it was handed over", c.Status.MachineName)
		return r.finish(s, ReasonDeleted, "the standby machine was deleted before it was handed over")
	}
	if err != nil {
		return r.providerError(s, err)
	}
	sb := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: from.Name}}
	if err := r.Client.Delete(ctx, sb, client.Preconditions{UID: &from.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return skeleton.Stop(), fmt.Errorf("deleting standby claim %s after taking its machine: %w", from.Name, err)
	}
	c.Status.BoundFrom = nil
	r.bound.Forget(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})
	return skeleton.Continue(), nil
}

// holdBound stops a standby claim that a claim took: the machine is that
// claim's. A binding the taking claim never recorded (it is gone, or took
// another machine: two reconciles racing a stale cache) is undone, and the
// machine is standby again.
func (r *Reconciler) holdBound(ctx context.Context, s *scope) (skeleton.Result, error) {
	sb := s.claim
	b, ok := standby.BoundTo(sb)
	if !ok {
		return skeleton.Continue(), nil
	}
	taker, err := r.taker(ctx, sb, b)
	if err != nil {
		return skeleton.Stop(), err
	}
	if taker != nil && taker.Status.BoundFrom != nil && taker.Status.BoundFrom.UID == sb.UID {
		s.progress = "handing machine " + sb.Status.MachineName + " to claim " + b.Name
		return skeleton.StopAndRequeue(r.ObserveInterval), nil
	}
	if wait := standby.BindGrace - s.now.Sub(b.At); taker != nil && wait > 0 {
		// Not recorded yet: the taking claim records it within
		// standby.RecordWithin of the bind, or never.
		return skeleton.StopAndRequeue(wait), nil
	}
	if taker != nil && taker.Status.MachineName == sb.Status.MachineName {
		return skeleton.StopAndRequeue(r.ObserveInterval), nil
	}
	patch := client.MergeFromWithOptions(sb.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(sb.Annotations, standby.BoundToAnnotation)
	if err := r.Client.Patch(ctx, sb, patch); err != nil {
		return skeleton.Stop(), fmt.Errorf("returning standby claim %s to standby: %w", sb.Name, err)
	}
	r.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "StandbyReturned", "Bind",
		"Claim %s never recorded machine %s; it is standby again", b.Name, sb.Status.MachineName)
	s.patch.Rebase()
	return skeleton.Continue(), nil
}

// taker reads the claim a standby claim is bound to as stored: the cache
// may not yet show the record it wrote a moment ago, and undoing a binding
// on a stale read would give one machine to two claims. nil: it is gone.
func (r *Reconciler) taker(ctx context.Context, sb *hypervisorv1alpha1.MachineClaim, b standby.Binding) (*hypervisorv1alpha1.MachineClaim, error) {
	taker := &hypervisorv1alpha1.MachineClaim{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: sb.Namespace, Name: b.Name}, taker)
	if apierrors.IsNotFound(err) || err == nil && taker.UID != b.UID {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading claim %s, which took standby claim %s: %w", b.Name, sb.Name, err)
	}
	return taker, nil
}

// binding is what this process bound for a claim: the standby claim's
// UID and when.
type binding struct {
	uid types.UID
	at  time.Time
}

// handedOver, in a standby claim's finalizer: when the claim that took its
// machine recorded it, the machine is handed over (again, idempotently)
// instead of deleted. ok false: delete the machine as any claim does.
func (r *Reconciler) handedOver(ctx context.Context, s *scope) (bool, error) {
	sb := s.claim
	b, bound := standby.BoundTo(sb)
	if !bound || !standby.IsStandby(sb) {
		return false, nil
	}
	taker, err := r.taker(ctx, sb, b)
	if err != nil || taker == nil || taker.Status.BoundFrom == nil || taker.Status.BoundFrom.UID != sb.UID {
		return false, err
	}
	p, err := r.providerForClaim(ctx, s)
	if err != nil {
		return false, err
	}
	changer, ok := p.(providers.OwnerChanger)
	if !ok {
		return false, nil
	}
	if err := changer.ChangeOwner(ctx, machineRef(sb), owner(sb), owner(taker)); err != nil {
		return false, err
	}
	return true, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
