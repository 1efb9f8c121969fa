package machineclaim

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// Termination reasons, in status.terminationReason.
const (
	ReasonExpired             = "Expired"
	ReasonShutDown            = "ShutDown"
	ReasonMachineFailed       = "MachineFailed"
	ReasonDeleted             = "Deleted"
	ReasonProvisioningTimeout = "ProvisioningTimeout"
)

// ReasonMachineNameTaken: the machine's name is held by a machine
// HyperFleet does not own, and the provider offers no other.
const ReasonMachineNameTaken = "MachineNameTaken"

// ReasonClusterDeleting: the claim's cluster is being deleted, so no
// machine is made for it.
const ReasonClusterDeleting = "ClusterDeleting"

// pollWhileBusy is how often a machine that is being made is looked at
// when its provider does not say it will wake the claim (providers.Waker).
const pollWhileBusy = 2 * time.Second

// pollForAddress is how often a running machine is asked for its address
// until the guest reports one: nothing outside says when a guest has
// booted, so this is a poll, and short, since it is the last step of every
// claim.
const pollForAddress = time.Second

// finalize deletes the machine, then releases the claim. Past the deadline
// the claim is released anyway — with a Warning event, a metric and the
// machine left to the orphan sweeper — so an unreachable hypervisor cannot
// pin it forever. The driver runs it only on a claim that still holds the
// finalizer (one without it was let go already), and forgets the claim's
// backoff and boot once it is released, whether or not the release's
// write succeeds.
func (r *Reconciler) finalize(ctx context.Context, s *scope) (skeleton.Result, error) {
	claim := s.claim
	ref := machineRef(claim)
	done := ref.Name == "" && ref.VMID == 0
	var err error
	handed := false
	if !done {
		// A standby claim whose machine a claim took and recorded hands
		// it over rather than delete it.
		handed, err = r.handedOver(ctx, s)
		done = handed
	}
	b, bound := standby.BoundTo(claim)
	if !done && err == nil {
		err = r.deleteMachine(ctx, s)
		if errors.Is(err, providers.ErrNotOwned) && bound {
			// Its taker made the machine its own already.
			err, handed = nil, true
		}
		if errors.Is(err, providers.ErrNotOwned) {
			// The recorded reference holds someone else's machine: nothing of ours to delete.
			r.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, "NothingToDelete", "Delete",
				"%s holds a machine HyperFleet does not own; left untouched", ref)
			err = nil
		}
		done = err == nil
	}
	if !done {
		if s.now.Before(skeleton.DeletionDeadline(claim, r.FinalizationTimeout)) {
			if errors.Is(err, providers.ErrInProgress) {
				// Under way, as asked: the claim's deletionTimestamp says so,
				// and a status write to say it again would be one more write
				// per claim for an object about to go. Only a failing
				// deletion is written (Stopping, with the error).
				return skeleton.StopAndRequeue(2 * time.Second), nil
			}
			s.deletion = &deletion{finalizing: true, err: err}
			return skeleton.StopAndRequeue(r.backoff.next(claim, providers.RetryAfter(err))), nil
		}
		finalizerDeadlineExceeded.WithLabelValues(string(claim.Status.Provider)).Inc()
		r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, "FinalizerDeadlineExceeded", "Delete",
			"Released after %s without confirming machine %s was deleted: %v; the orphan sweeper deletes it once the hypervisor answers",
			r.FinalizationTimeout, ref, err)
	} else if handed {
		r.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, "HandedOver", "Delete", "Machine %s is now claim %s's", ref.Name, b.Name)
	} else {
		r.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, "MachineDeleted", "Delete", "Machine %s deleted", ref.Name)
	}
	r.deleteOwnedUserData(ctx, claim)
	if !handed {
		// A machine handed over keeps its SPIRE identity: it is its
		// taker's now (status.attestation), forgotten when that goes.
		r.forgetAttestation(ctx, claim, r.templateOf(ctx, claim))
	}
	if err := s.patch.ReleaseFinalizer(ctx, Finalizer); err != nil {
		return skeleton.Stop(), err
	}
	s.released = true
	return skeleton.Stop(), nil
}

// ended stops at a Terminated or Failed claim: its machine is gone, and it
// stays as a record until deleted.
func (r *Reconciler) ended(_ context.Context, s *scope) (skeleton.Result, error) {
	if terminal(s.claim.Status.Phase) {
		return skeleton.Stop(), nil
	}
	return skeleton.Continue(), nil
}

// retire goes on deleting the machine of a Stopping claim.
func (r *Reconciler) retire(ctx context.Context, s *scope) (skeleton.Result, error) {
	if s.claim.Status.Phase != hypervisorv1alpha1.MachineStopping {
		return skeleton.Continue(), nil
	}
	return r.retireMachine(ctx, s)
}

// resolve loads template, cluster and provider; without them the claim
// waits.
func (r *Reconciler) resolve(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	if !c.Spec.TemplateRef.IsMachineTemplate() {
		return r.resolveSource(ctx, s)
	}
	t := &hypervisorv1alpha1.HypervisorMachineTemplate{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.TemplateRef.Name}, t); err != nil {
		if apierrors.IsNotFound(err) {
			s.blocked = &blocker{state: conditions.Waiting, reason: meta.DependencyNotFoundReason,
				message: fmt.Sprintf("HypervisorMachineTemplate %s (spec.templateRef) not found", c.Spec.TemplateRef.Name)}
			return skeleton.StopAndRequeue(time.Minute), nil
		}
		s.blocked = &blocker{state: conditions.Waiting, reason: "TemplateUnreadable", message: err.Error()}
		return skeleton.StopAndRequeue(r.backoff.next(c, 0)), nil
	}
	clusterName := c.Status.ClusterName
	if clusterName == "" {
		clusterName = t.Spec.ClusterRef.Name
	}
	cluster := &hypervisorv1alpha1.HypervisorCluster{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: clusterName}, cluster); err != nil {
		s.blocked = &blocker{state: conditions.Waiting, reason: meta.DependencyNotFoundReason,
			message: fmt.Sprintf("HypervisorCluster %s: %v", clusterName, err)}
		return skeleton.StopAndRequeue(time.Minute), nil
	}
	if !cluster.DeletionTimestamp.IsZero() && c.Status.MachineName == "" {
		begun, err := r.machineBegun(ctx, s)
		if err != nil {
			return skeleton.Stop(), err
		}
		if begun {
			// The cache was behind this claim's own checkpoint: go on with
			// the machine, as the claim as stored says.
			return r.resolve(ctx, s)
		}
		// No machine was begun on it: a new one would outlive the cluster
		// that can delete it. A claim that has one goes on, so its machine
		// can still be observed and deleted.
		s.blocked = &blocker{state: conditions.Waiting, reason: ReasonClusterDeleting,
			message: fmt.Sprintf("HypervisorCluster %s is being deleted: no new machine is made on it; point template %s (spec.clusterRef) at another cluster, or delete this claim",
				clusterName, t.Name)}
		return skeleton.StopAndRequeue(time.Minute), nil
	}
	p, err := r.Hypervisors.For(ctx, cluster)
	if err != nil {
		s.blocked = &blocker{state: conditions.Waiting, reason: meta.DependencyNotReadyReason,
			message: fmt.Sprintf("HypervisorCluster %s: %v", clusterName, err)}
		return skeleton.StopAndRequeue(r.backoff.next(c, time.Minute)), nil
	}
	s.template, s.cluster, s.provider = t, cluster, p
	c.Status.ClusterName, c.Status.Provider = cluster.Name, cluster.Spec.Provider
	return skeleton.Continue(), nil
}

// machineBegun reads the claim as stored, past the cache, before it gives
// up a machine for good because its cluster is being deleted: a reconcile
// that runs before the cache has this claim's own checkpoint (the reference
// recorded, the create call made) would otherwise see no machine, stop
// making it, and leave a half-made VM that the deleting cluster, counting
// the claim's machine as gone, strands when it is released. When the
// stored claim has a machine, its status becomes the reconcile's, and the
// base of its status write, so nothing older is written over it.
func (r *Reconciler) machineBegun(ctx context.Context, s *scope) (bool, error) {
	stored := &hypervisorv1alpha1.MachineClaim{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.claim), stored); err != nil {
		return false, fmt.Errorf("reading the claim as stored before giving up its machine: %w", err)
	}
	if stored.Status.MachineName == "" {
		return false, nil
	}
	adopt(s, stored)
	return true, nil
}

// adopt makes the status of the claim as stored the reconcile's, and the
// base of its status write, so nothing older is written over it.
func adopt(s *scope, stored *hypervisorv1alpha1.MachineClaim) {
	s.claim.Status = *stored.Status.DeepCopy()
	s.claim.ResourceVersion = stored.ResourceVersion
	s.patch.Rebase()
}

// deadlines retires a machine not Ready within the provisioning timeout,
// or past its expiry.
func (r *Reconciler) deadlines(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	if c.Status.ReadyTime == nil {
		if deadline := c.CreationTimestamp.Add(provisioningTimeout(c)); !s.now.Before(deadline) {
			return r.beginRetire(ctx, s, ReasonProvisioningTimeout,
				fmt.Sprintf("the machine was not Ready within spec.provisioningTimeout (%s)", provisioningTimeout(c)))
		}
	}
	if exp := expiry(c); exp != nil && !s.now.Before(exp.Time) {
		return r.beginRetire(ctx, s, ReasonExpired, "the claim's timeout or maxLifetime ran out")
	}
	return skeleton.Continue(), nil
}

// assignReference takes the machine's reference from the provider. It is
// written to status before any create call (provision's record), so a
// crash after the call finds the same machine instead of making a twin.
func (r *Reconciler) assignReference(_ context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	if c.Status.MachineName != "" {
		return skeleton.Continue(), nil
	}
	ref := requested(c, s.provider.Reference(owner(c)))
	setReference(c, ref)
	s.progress = "chose machine " + ref.Name
	s.unrecorded = true
	return skeleton.Continue(), nil
}

// record writes a reference chosen in this reconcile to status before the
// first create call. A provider that queues machines (an Admitter) is asked
// first: a machine that must wait makes nothing, and its reference goes
// with the wait in the reconcile's one status write.
func (r *Reconciler) record(ctx context.Context, s *scope, spec providers.MachineSpec) (stop bool, res skeleton.Result, err error) {
	if !s.unrecorded {
		return false, skeleton.Continue(), nil
	}
	if a, ok := s.provider.(providers.Admitter); ok {
		if err := a.Admit(ctx, spec); err != nil {
			res, err := r.providerError(s, err)
			return true, res, err
		}
	}
	if err := r.checkpoint(ctx, s); err != nil {
		return true, skeleton.Stop(), err
	}
	return false, skeleton.Continue(), nil
}

// ensureAddress gives a claim on a static-addressed template its address,
// recorded in status before the machine is created, and resolves the rare
// double assignment of two claims that chose at the same moment.
func (r *Reconciler) ensureAddress(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	pool := staticPool(s.template)
	if r.started(c) || len(pool) == 0 {
		return skeleton.Continue(), nil
	}
	if c.Status.AssignedAddress != "" && c.Status.ProviderID == "" {
		conflict, err := r.addressConflict(ctx, c)
		if err != nil {
			return skeleton.Stop(), err
		}
		if conflict {
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "AddressTaken", "Provision",
				"Address %s was also chosen by an older claim; choosing again", c.Status.AssignedAddress)
			c.Status.AssignedAddress = ""
		}
	}
	if c.Status.AssignedAddress != "" {
		return skeleton.Continue(), nil
	}
	if err := r.assignAddress(ctx, c, pool); err != nil {
		s.blocked = &blocker{state: conditions.Waiting, reason: "AddressPoolExhausted", message: err.Error()}
		return skeleton.StopAndRequeue(5 * time.Second), nil
	}
	s.progress = "took static address " + c.Status.AssignedAddress
	if err := r.checkpoint(ctx, s); err != nil {
		return skeleton.Stop(), err
	}
	// Look again once the write is visible, so a concurrent chooser is seen.
	return skeleton.StopAndRequeue(time.Second), nil
}

// provision moves the machine one step on through the provider's Create,
// until it has started.
func (r *Reconciler) provision(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	if r.started(c) {
		return skeleton.Continue(), nil
	}
	spec, err := machinespec.Resolve(ctx, r.APIReader, s.template, c)
	if err != nil {
		return r.providerError(s, err)
	}
	spec.Ref, spec.Owner = machineRef(c), owner(c)
	spec.Warm = standby.IsWarm(c)
	// The API server keeps it, so the clone queue's order survives a
	// restart or a change of leader.
	spec.Requested = c.CreationTimestamp.Time
	spec.Network.IPv4CIDR = c.Status.AssignedAddress
	if ref := c.Spec.UserDataSecretRef; ref != nil {
		data, err := r.userData(ctx, c, ref)
		if p, ok := providers.IsPermanent(err); ok && p.Reason == credentials.SecretNotForThisClaimReason {
			// Another machine's Secret: no wait makes it this claim's.
			s.blocked = &blocker{state: conditions.Stalled, reason: p.Reason, message: p.Message}
			return skeleton.StopAndRequeue(r.backoff.next(c, time.Minute)), nil
		}
		if err != nil {
			s.blocked = &blocker{state: conditions.Waiting, reason: meta.SecretNotFoundReason, message: err.Error()}
			return skeleton.StopAndRequeue(r.backoff.next(c, 10*time.Second)), nil
		}
		spec.CloudInit.UserData = data
	}
	if c.Spec.UserDataSecretRef == nil && c.Spec.UserData == "" && r.Runner != nil && s.template != nil {
		// A runner machine whose runner comes through the credential
		// endpoint: a runner's claim, or a standby machine for one.
		ud, ok, err := r.Runner.UserData(s.template, c.Name)
		if err != nil {
			s.blocked = &blocker{state: conditions.Stalled, reason: ReasonUserDataUnsupported, message: err.Error()}
			return skeleton.StopAndRequeue(r.backoff.next(c, time.Minute)), nil
		}
		if ok {
			spec.CloudInit.UserData = ud
		}
	}
	if mc := s.machineConfig; mc != nil {
		ud, err := attestation.WithMachineConfig(spec.CloudInit.UserData, *mc, s.attestRun)
		if err != nil {
			s.blocked = &blocker{state: conditions.Stalled, reason: ReasonUserDataUnsupported, message: err.Error()}
			return skeleton.StopAndRequeue(r.backoff.next(c, time.Minute)), nil
		}
		spec.CloudInit.UserData = ud
	}
	if stop, res, err := r.record(ctx, s, spec); stop {
		return res, err
	}
	m, err := s.provider.Create(ctx, spec)
	if errors.Is(err, providers.ErrNameTaken) {
		taken := machineRef(c)
		if tried := referencesTried(s.provider, c, taken); tried >= maxReferences {
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, ReasonReferencesExhausted, "Provision",
				"%s is taken by a machine HyperFleet does not own, the %d%s reference in a row; giving up", taken, tried, ordinal(tried))
			return r.finish(s, ReasonReferencesExhausted, fmt.Sprintf(
				"%d references in a row (the last %s) were each held by a machine HyperFleet does not own: %v", tried, taken, err))
		}
		if next, ok := s.provider.NextReference(owner(c), taken); ok && requested(c, next) != taken {
			next = requested(c, next)
			setReference(c, next)
			s.progress = fmt.Sprintf("%s belongs to a machine HyperFleet does not own; using %s", taken, next)
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "NameTaken", "Provision",
				"%s is taken by a machine HyperFleet does not own; trying %s", taken, next)
			if err := r.checkpoint(ctx, s); err != nil {
				return skeleton.Stop(), err
			}
			return skeleton.StopAndRequeue(time.Second), nil
		}
		// The name the claim asks for (spec.machineName) is somebody
		// else's: waited on, never exchanged, so it says so by name.
		s.blocked = &blocker{state: conditions.Waiting, reason: ReasonMachineNameTaken,
			message: fmt.Sprintf("%v; the claim waits for that machine to go: delete it, or delete this claim", err)}
		return skeleton.StopAndRequeue(r.backoff.next(c, providers.RetryAfter(err))), nil
	}
	if err != nil {
		return r.providerError(s, err)
	}
	r.backoff.reset(c)
	r.taskWarnings(c, m)
	if m.Created {
		for _, n := range m.Notices {
			r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "TemplateAdjusted", "Provision", "%s", n)
		}
	}
	if m.Warm {
		return r.warm(s, m)
	}
	if !m.Provisioned || m.State == providers.PowerProvisioning {
		// Where it is being made is recorded once it is made: each step
		// would otherwise be a status write of its own.
		s.machine = &m
		return skeleton.StopAndRequeue(r.untilNews(m)), nil
	}
	return r.evaluate(ctx, s, m)
}

// warm records a warm standby machine made: cloned and powered off, it is
// Warm from now on (Ready for kstatus; its idle time and its maxLifetime
// count from here) until a claim takes it or it ages out. It is looked at
// again every observe interval, so one deleted by hand is noticed.
func (r *Reconciler) warm(s *scope, m providers.Machine) (skeleton.Result, error) {
	c := s.claim
	record(c, m)
	s.machine = &m
	if c.Status.ReadyTime == nil {
		now := metav1.NewTime(s.now)
		c.Status.ReadyTime = &now
	}
	c.Status.ExpiryTime = expiry(c)
	next := r.ObserveInterval
	if c.Status.ExpiryTime != nil {
		next = min(next, c.Status.ExpiryTime.Sub(s.now))
	}
	return skeleton.StopAndRequeue(max(next, time.Second)), nil
}

// observe looks at a started machine.
func (r *Reconciler) observe(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	ref := machineRef(c)
	if ref.Node == "" {
		// Booting: status has no node yet (booting.go), but the last look did.
		ref.Node = r.booting.node(c)
	}
	m, err := s.provider.Observe(ctx, ref)
	if errors.Is(err, providers.ErrNotFound) {
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "MachineGone", "Observe", "Machine %s disappeared from the hypervisor", c.Status.MachineName)
		return r.finish(s, ReasonDeleted, "the machine was deleted outside HyperFleet")
	}
	if err != nil {
		return r.providerError(s, err)
	}
	r.taskWarnings(c, m)
	return r.evaluate(ctx, s, m)
}

// ReasonTaskWarnings is the event of a hypervisor task that succeeded with
// warnings (Proxmox's "WARNINGS: <n>"): the machine goes on, and whoever
// looks at the claim learns the hypervisor had something to say.
const ReasonTaskWarnings = "HypervisorTaskWarnings"

// taskWarnings records, as events, the warnings the provider hands over
// once each (providers.Machine.Warnings).
func (r *Reconciler) taskWarnings(c *hypervisorv1alpha1.MachineClaim, m providers.Machine) {
	for _, w := range m.Warnings {
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, ReasonTaskWarnings, "Observe", "%s", w)
	}
}

// evaluate decides from an observed, provisioned machine.
func (r *Reconciler) evaluate(ctx context.Context, s *scope, m providers.Machine) (skeleton.Result, error) {
	c := s.claim
	if m.State == providers.PowerRunning && len(m.Addresses) == 0 && c.Status.StartTime == nil {
		// Booting: nothing is written until the guest reports an address
		// or the grace runs out (booting.go), so a claim shows Provisioning
		// until Ready. Provisioning is what status says already, unless a
		// passing error was written since; then it says so again.
		if since := r.booting.seen(c, s.now, m.Node); s.now.Sub(since) < addressGrace {
			s.progress = "booting"
			return skeleton.StopAndRequeue(jitter(pollForAddress)), nil
		}
	}
	record(c, m)
	s.machine = &m
	switch m.State {
	case providers.PowerStopped:
		return r.beginRetire(ctx, s, ReasonShutDown, "the machine powered itself off")
	case providers.PowerFailed:
		return r.beginRetire(ctx, s, ReasonMachineFailed, "the hypervisor reports the machine failed")
	case providers.PowerProvisioning, providers.PowerUnknown:
		return skeleton.StopAndRequeue(r.untilNews(m)), nil
	}
	now := metav1.NewTime(s.now)
	if c.Status.StartTime == nil {
		// When it was first seen running, which may be a few polls before
		// this status write.
		start := metav1.NewTime(r.booting.seen(c, s.now, m.Node))
		c.Status.StartTime = &start
		r.booting.forget(c)
	}
	if len(m.Addresses) == 0 {
		return skeleton.StopAndRequeue(jitter(pollForAddress)), nil
	}
	if c.Status.ReadyTime == nil {
		c.Status.ReadyTime = &now
		provisionDuration.WithLabelValues(string(c.Status.Provider)).Observe(s.now.Sub(c.CreationTimestamp.Time).Seconds())
	}
	c.Status.ExpiryTime = expiry(c)
	next := r.ObserveInterval
	if c.Status.ExpiryTime != nil {
		next = min(next, c.Status.ExpiryTime.Sub(s.now))
	}
	return skeleton.StopAndRequeue(max(next, time.Second)), nil
}

// beginRetire records why the machine ends and starts deleting it.
func (r *Reconciler) beginRetire(ctx context.Context, s *scope, reason, message string) (skeleton.Result, error) {
	c := s.claim
	if c.Status.TerminationReason == "" {
		c.Status.TerminationReason = reason
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Retiring", "Retire", "Retiring machine %s: %s", c.Status.MachineName, message)
	}
	return r.retireMachine(ctx, s)
}

// retireMachine deletes the machine; once gone the claim is Terminated (or
// Failed, when it never became Ready in time).
func (r *Reconciler) retireMachine(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	s.deletion = &deletion{}
	if c.Status.MachineName == "" {
		return r.finish(s, c.Status.TerminationReason, "no machine was made")
	}
	err := r.deleteMachine(ctx, s)
	switch {
	case err == nil:
		r.forgetAttestation(ctx, c, s.template)
		return r.finish(s, c.Status.TerminationReason, "machine "+c.Status.MachineName+" deleted")
	case errors.Is(err, providers.ErrInProgress):
		return skeleton.StopAndRequeue(jitter(pollWhileBusy)), nil
	}
	s.deletion.err = err
	return skeleton.StopAndRequeue(r.backoff.next(c, providers.RetryAfter(err))), nil
}

// untilNews is how long to wait before looking at a machine still being
// made: its provider wakes the claim when the task it waits for ends
// (Machine.WillWake), so the look after ObserveInterval is only in case a
// wake was lost; otherwise it is polled.
func (r *Reconciler) untilNews(m providers.Machine) time.Duration {
	if m.WillWake {
		return r.ObserveInterval
	}
	return jitter(pollWhileBusy)
}

// finish records that the machine is gone, and why.
func (r *Reconciler) finish(s *scope, reason, how string) (skeleton.Result, error) {
	s.claim.Status.TerminationReason = reason
	s.ended = how
	r.backoff.reset(s.claim)
	r.booting.forget(s.claim)
	return skeleton.Stop(), nil
}

// providerError records a provider failure and chooses the retry delay.
func (r *Reconciler) providerError(s *scope, err error) (skeleton.Result, error) {
	c := s.claim
	if p, ok := providers.IsPermanent(err); ok {
		s.blocked = &blocker{state: conditions.Stalled, reason: p.Reason, message: p.Message}
		return skeleton.StopAndRequeue(r.backoff.next(c, time.Minute)), nil
	}
	reason := "HypervisorError"
	var t *providers.TransientError
	if errors.As(err, &t) && t.Reason != "" {
		reason = t.Reason
	}
	s.blocked = &blocker{state: conditions.Waiting, reason: reason, message: err.Error(), keepPhase: true}
	if errors.Is(err, providers.ErrQueued) {
		// Queueing is expected under a burst: no escalation. A provider
		// that wakes the claim when its turn comes (a Waker) is left to
		// do so; the long look is only in case a wake was lost.
		s.blocked.state = conditions.Progressing
		if _, ok := s.provider.(providers.Waker); ok {
			return skeleton.StopAndRequeue(r.ObserveInterval), nil
		}
		return skeleton.StopAndRequeue(jitter(providers.RetryAfter(err))), nil
	}
	return skeleton.StopAndRequeue(r.backoff.next(c, providers.RetryAfter(err))), nil
}

// checkpoint writes the status now, before a call that must find it
// recorded (a create after a reference or an address was chosen), and
// takes it as the base of the final write.
func (r *Reconciler) checkpoint(ctx context.Context, s *scope) error {
	if err := s.patch.Checkpoint(ctx, computeStatus(s, nil)); err != nil {
		return err
	}
	s.unrecorded = false
	return nil
}

// setReference records the reference a provider proposed.
// maxReferences bounds the references a claim tries, each a machine made
// or found taken: a hypervisor where every reference turns out someone
// else's (marks that confuse ownership, a template whose clones never look
// ours) would otherwise have the claim make machine after machine.
const maxReferences = 3

// ReasonReferencesExhausted ends a claim whose references were all taken.
const ReasonReferencesExhausted = "ReferencesExhausted"

// referencesTried is how many references the claim has tried up to and
// including taken: its place in the provider's deterministic sequence
// (Reference, then NextReference of each), which status records, so the
// count survives a restart without a field of its own. A reference not
// among the first maxReferences counts as maxReferences.
func referencesTried(p providers.Hypervisor, c *hypervisorv1alpha1.MachineClaim, taken providers.MachineRef) int {
	o := owner(c)
	ref := p.Reference(o)
	for n := 1; n < maxReferences; n++ {
		if r := requested(c, ref); r.VMID == taken.VMID && r.Name == taken.Name {
			return n
		}
		next, ok := p.NextReference(o, ref)
		if !ok {
			break
		}
		ref = next
	}
	return maxReferences
}

// requested is ref with the name the claim asks for (spec.machineName),
// if it asks for one: the provider's other choices (a Proxmox VMID) stay.
// A reference that differed only in its name is then no other reference,
// so a name taken by a machine HyperFleet does not own is never given up
// for another: the claim waits on it (providerError).
func requested(c *hypervisorv1alpha1.MachineClaim, ref providers.MachineRef) providers.MachineRef {
	if c.Spec.MachineName != "" {
		ref.Name = c.Spec.MachineName
	}
	return ref
}

func ordinal(n int) string {
	switch n {
	case 1:
		return "st"
	case 2:
		return "nd"
	case 3:
		return "rd"
	}
	return "th"
}

func setReference(c *hypervisorv1alpha1.MachineClaim, ref providers.MachineRef) {
	c.Status.MachineName = ref.Name
	c.Status.VMID = nil
	if ref.VMID != 0 {
		id := int32(ref.VMID) //nolint:gosec // VMIDs fit int32
		c.Status.VMID = &id
	}
}

// userData reads cloud-init user data from a Secret key (the Secret needs
// the credentials label, and must not be one made for another machine).
func (r *Reconciler) userData(ctx context.Context, c *hypervisorv1alpha1.MachineClaim, ref *meta.SecretKeyReference) (string, error) {
	secret, err := r.Credentials.ClaimSecret(ctx, types.NamespacedName{Namespace: c.Namespace, Name: ref.Name}, "spec.userDataSecretRef", c)
	if err != nil {
		if p, ok := providers.IsPermanent(err); ok && p.Reason != credentials.SecretNotForThisClaimReason {
			return "", errors.New(p.Message)
		}
		return "", err
	}
	v, ok := secret.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("the Secret %s has no key %q (spec.userDataSecretRef.key)", ref.Name, ref.Key)
	}
	return string(v), nil
}

// record copies what the provider observed into status.
func record(c *hypervisorv1alpha1.MachineClaim, m providers.Machine) {
	if m.ProviderID != "" && m.Node != "" {
		c.Status.ProviderID = m.ProviderID
	}
	if m.Node != "" {
		c.Status.Node = m.Node
	}
	if len(m.Addresses) > 0 {
		addrs := make([]hypervisorv1alpha1.MachineAddress, 0, len(m.Addresses))
		for _, a := range m.Addresses {
			addrs = append(addrs, hypervisorv1alpha1.MachineAddress{Type: "IPv4", Address: a})
		}
		c.Status.Addresses = addrs
	}
}

func provisioningTimeout(c *hypervisorv1alpha1.MachineClaim) time.Duration {
	if d := c.Spec.ProvisioningTimeout; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return 15 * time.Minute
}

// expiry is the earlier of readyTime+timeout and creation+maxLifetime.
func expiry(c *hypervisorv1alpha1.MachineClaim) *metav1.Time {
	var out *metav1.Time
	consider := func(t time.Time) {
		if out == nil || t.Before(out.Time) {
			v := metav1.NewTime(t)
			out = &v
		}
	}
	if d := c.Spec.MaxLifetime; d != nil && d.Duration > 0 {
		consider(c.CreationTimestamp.Add(d.Duration))
	}
	if d := c.Spec.Timeout; d != nil && d.Duration > 0 && c.Status.ReadyTime != nil {
		consider(c.Status.ReadyTime.Add(d.Duration))
	}
	return out
}
