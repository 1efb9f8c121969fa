package cyberdesk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// The MachineClaim termination reasons a desk translates (its claim's
// status.terminationReason), and ReasonClaimNameTaken for a claim of the
// desk's name that is not the desk's.
const (
	claimExpired       = "Expired"
	claimShutDown      = "ShutDown"
	claimMachineFailed = "MachineFailed"
	claimDeleted       = "Deleted"
	claimNameTaken     = "MachineNameTaken"

	// ReasonVMNameTaken: a VM of the desk's VM name exists that is not
	// the desk's.
	ReasonVMNameTaken = "VMNameTaken"

	ReasonClaimNameTaken = "ClaimNameTaken"
)

// LabelDesk is on every desk's claim: the desk's name.
const LabelDesk = "cyberdesk.io/name"

// ensureClaim makes the desk's MachineClaim, named after it, or finds it,
// and keeps its timeout in step with timeoutMs. A desk that has ended makes
// no new claim: its VM is gone for good.
func (r *Reconciler) ensureClaim(ctx context.Context, s *scope) (skeleton.Result, error) {
	d := s.desk
	c := &hypervisorv1alpha1.MachineClaim{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: d.Name}, c)
	switch {
	case apierrors.IsNotFound(err):
		if ended(d) {
			return skeleton.Stop(), nil
		}
		if vmUID(d) != "" && !r.ownsVM(ctx, d) {
			// It had a VM, and its claim was deleted outside HyperFleet:
			// the claim took the VM with it, or left it to the sweeper.
			s.ended = &ending{reason: ReasonVMDeleted, what: "MachineClaim " + d.Name + " and its VirtualMachine " + vmName(d) + " were deleted outside HyperFleet"}
			return skeleton.Stop(), nil
		}
		return r.createClaim(ctx, s)
	case err != nil:
		return skeleton.Stop(), err
	}
	if !metav1.IsControlledBy(c, d) {
		s.blocked = &blocker{phase: cyberdeskv1alpha1.CyberdeskPending, state: conditions.Stalled, reason: ReasonClaimNameTaken,
			message: fmt.Sprintf("MachineClaim %s exists and does not belong to this Cyberdesk; delete that claim or use another Cyberdesk name", d.Name)}
		return skeleton.StopAndRequeue(time.Minute), nil
	}
	s.claim = c
	if want := claimTimeout(d, c); c.DeletionTimestamp.IsZero() && !terminal(c) && (c.Spec.Timeout == nil || c.Spec.Timeout.Duration != want) {
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.Timeout = &metav1.Duration{Duration: want}
		if err := r.Client.Patch(ctx, c, patch); err != nil {
			return skeleton.Stop(), fmt.Errorf("moving MachineClaim %s's timeout to the desk's timeoutMs: %w", c.Name, err)
		}
	}
	return skeleton.Continue(), nil
}

// createClaim makes the desk's claim: the VM cyberdesk-<name> from the
// desk template (Source), with the desk's user data and timeout.
func (r *Reconciler) createClaim(ctx context.Context, s *scope) (skeleton.Result, error) {
	d := s.desk
	c := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: map[string]string{LabelDesk: d.Name},
			// Made with it, so the claim's reconciler need not write it.
			Finalizers: []string{hypervisorv1alpha1.MachineClaimFinalizer}},
		Spec: hypervisorv1alpha1.MachineClaimSpec{
			TemplateRef: hypervisorv1alpha1.TemplateReference{APIGroup: cyberdeskv1alpha1.GroupVersion.Group, Kind: OwnerKind, Name: d.Name},
			MachineName: fixedVMName(d),
			Timeout:     &metav1.Duration{Duration: claimTimeout(d, nil)},
			UserData:    d.Spec.UserData,
		},
	}
	if r.mayTakeStandby(ctx, d) {
		// No name of its own: the claim takes a hot machine, by that
		// machine's name (standby.Fits), or, if another desk took it
		// first, makes one of the claim's name.
		c.Spec.MachineName = ""
	}
	if err := controllerutil.SetControllerReference(d, c, r.Client.Scheme()); err != nil {
		return skeleton.Stop(), err
	}
	if err := r.Client.Create(ctx, c); err != nil {
		// AlreadyExists: made by an earlier reconcile the cache has not
		// shown yet; the driver requeues it quietly.
		return skeleton.Stop(), fmt.Errorf("creating MachineClaim %s: %w", c.Name, err)
	}
	s.claim = c
	return skeleton.Continue(), nil
}

// mayTakeStandby reports whether a new desk's claim is made to take a hot
// desk machine: the desk has no user data of its own (a hot machine booted
// with none) and its namespace has a hot machine free now, as the cache
// shows it.
func (r *Reconciler) mayTakeStandby(ctx context.Context, d *cyberdeskv1alpha1.Cyberdesk) bool {
	if d.Spec.UserData != "" || r.Standby.hot(d.Namespace) == 0 {
		return false
	}
	var list hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingLabels{standby.TemplateLabel: StandbyTemplate}); err != nil {
		return false
	}
	for i := range list.Items {
		if r.Standby.free(&list.Items[i]) {
			return true
		}
	}
	return false
}

// claimTimeout is the timeout the desk's claim needs to end at the desk's
// expiry. A claim counts its timeout from Ready (its machine's first
// address); a desk counts timeoutMs from when its VM started, so once
// both are known the claim is given the difference.
func claimTimeout(d *cyberdeskv1alpha1.Cyberdesk, c *hypervisorv1alpha1.MachineClaim) time.Duration {
	t := time.Duration(timeoutMs(d)) * time.Millisecond
	if start := deskStart(d, c); start != nil && c != nil && c.Status.ReadyTime != nil {
		t = start.Add(t).Sub(c.Status.ReadyTime.Time)
	}
	// The claim's smallest timeout: a desk lowered below the time it has
	// used ends at once anyway.
	return max(t.Truncate(time.Millisecond), time.Second)
}

// deskStart is when the desk's VM first ran: as the desk recorded it (a VM
// handed over from before desks had claims ran before its claim saw it),
// else as its claim saw it.
func deskStart(d *cyberdeskv1alpha1.Cyberdesk, c *hypervisorv1alpha1.MachineClaim) *metav1.Time {
	if d.Status.StartTime != nil {
		return d.Status.StartTime
	}
	if c != nil {
		return c.Status.StartTime
	}
	return nil
}

// adoptVM hands a VM made for the desk itself (by the Kopf operator, or by
// HyperFleet before desks had claims) to the desk's claim, so the claim
// follows and deletes the VM the user has been using rather than refusing
// its name.
func (r *Reconciler) adoptVM(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	if r.Adopter == nil || c == nil || !c.DeletionTimestamp.IsZero() ||
		c.Status.Phase != "" && c.Status.Phase != hypervisorv1alpha1.MachinePending {
		// Only a claim that has not found its VM yet can meet the desk's.
		return skeleton.Continue(), nil
	}
	d := s.desk
	ref := providers.MachineRef{Name: fixedVMName(d), Namespace: d.Namespace}
	from := providers.Owner{UID: string(d.UID), Namespace: d.Namespace, Name: d.Name}
	to := providers.Owner{UID: string(c.UID), Namespace: c.Namespace, Name: c.Name}
	err := r.Adopter.ChangeOwner(ctx, ref, from, to)
	switch {
	case err == nil, errors.Is(err, providers.ErrNotFound), errors.Is(err, providers.ErrNotOwned):
		// Handed over, or nothing of the desk's to hand: the claim makes
		// its VM, or reports a name held by somebody else.
		return skeleton.Continue(), nil
	}
	return s.claimFailed(err), nil
}

// ownsVM reports whether a desk that had a VM, and has no claim, owns its
// VM itself: one made before desks had claims, to be handed to the claim
// it is about to make.
func (r *Reconciler) ownsVM(ctx context.Context, d *cyberdeskv1alpha1.Cyberdesk) bool {
	if r.Adopter == nil {
		return false
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: fixedVMName(d)}, vm); err != nil {
		// Unreadable: a claim made now meets the name check, and waits.
		return !apierrors.IsNotFound(err)
	}
	return vm.Labels[kubevirt.LabelOwnerUID] == string(d.UID)
}

// followClaim reads the claim's state into the desk's words: its VM being
// made, running, retired and why, or stopped short.
func (r *Reconciler) followClaim(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	if c == nil {
		return skeleton.Continue(), nil
	}
	d := s.desk
	st := &c.Status
	if start := deskStart(d, c); start != nil {
		expiry := metav1.NewTime(start.Add(time.Duration(timeoutMs(d)) * time.Millisecond))
		s.started, s.expiry = start, &expiry
	}
	if st.Phase == hypervisorv1alpha1.MachineTerminated || st.Phase == hypervisorv1alpha1.MachineFailed {
		s.ended = endingOf(d, c)
		return skeleton.Continue(), nil
	}
	if st.Phase == hypervisorv1alpha1.MachineStopping {
		s.retire = deskReason(st.TerminationReason)
		s.deleteErr = deletionTrouble(c)
	}
	if st.MachineName != "" && st.Phase != hypervisorv1alpha1.MachinePending && st.Phase != "" {
		m, err := r.machine(ctx, d, c)
		if err != nil {
			return skeleton.Stop(), err
		}
		s.machine = m
	}
	if s.retire == "" {
		s.blocked = blockerOf(c)
	}
	return skeleton.Continue(), nil
}

// machine is the desk's VM as its claim shows it, with the VM's UID: the
// desk records it, so it is read once, past the cache.
func (r *Reconciler) machine(ctx context.Context, d *cyberdeskv1alpha1.Cyberdesk, c *hypervisorv1alpha1.MachineClaim) (*providers.Machine, error) {
	st := &c.Status
	m := &providers.Machine{Node: st.Node, State: providers.PowerProvisioning}
	if _, msg := conditions.ReadyMessage(c); msg != "" {
		m.Progress = msg
	}
	switch st.Phase {
	case hypervisorv1alpha1.MachineRunning, hypervisorv1alpha1.MachineReady:
		m.State = providers.PowerRunning
	}
	for _, a := range st.Addresses {
		if a.Type != "Hostname" {
			m.Addresses = append(m.Addresses, a.Address)
		}
	}
	if ref := d.Status.VirtualMachineRef; ref != nil && ref.UID != "" {
		m.UID = ref.UID
		return m, nil
	}
	vm := &kubevirtv1.VirtualMachine{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: st.MachineName}, vm)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reading VirtualMachine %s: %w", st.MachineName, err)
	case vm.Labels[kubevirt.LabelOwnerUID] == string(c.UID):
		m.UID = string(vm.UID)
	}
	return m, nil
}

// blockerOf is what stops the claim short, as the desk shows it: a claim
// Stalled, or waiting on something outside, with the claim's reason and
// message (the template, KubeVirt, the VM's name).
func blockerOf(c *hypervisorv1alpha1.MachineClaim) *blocker {
	ready := apimeta.FindStatusCondition(c.Status.Conditions, meta.ReadyCondition)
	if ready == nil || ready.Status == metav1.ConditionTrue {
		return nil
	}
	stalled := apimeta.IsStatusConditionTrue(c.Status.Conditions, meta.StalledCondition)
	if ready.Reason == claimNameTaken {
		// The Kopf operator's word for it, and its phase, whichever order
		// the claim's writes came in (a checkpoint may have made it
		// Provisioning first).
		b := &blocker{phase: cyberdeskv1alpha1.CyberdeskPending, state: conditions.Waiting, reason: ReasonVMNameTaken, message: ready.Message}
		if stalled {
			b.state = conditions.Stalled
		}
		return b
	}
	if stalled {
		b := &blocker{state: conditions.Stalled, reason: ready.Reason, message: ready.Message}
		// Stopped short before its VM ever ran (a template the provider
		// refuses at create): Pending, whichever order the claim's
		// checkpoint and its Stalled write reached the desk in.
		if c.Status.Phase == "" || c.Status.Phase == hypervisorv1alpha1.MachinePending || c.Status.StartTime == nil {
			b.phase = cyberdeskv1alpha1.CyberdeskPending
		}
		return b
	}
	if apimeta.IsStatusConditionTrue(c.Status.Conditions, meta.ReconcilingCondition) {
		return nil // under way
	}
	return &blocker{state: conditions.Waiting, reason: ready.Reason, message: ready.Message}
}

// endingOf is how the claim's machine ended, in the desk's words.
func endingOf(d *cyberdeskv1alpha1.Cyberdesk, c *hypervisorv1alpha1.MachineClaim) *ending {
	reason := deskReason(c.Status.TerminationReason)
	what := "VM " + vmName(d) + " deleted"
	switch reason {
	case ReasonVMDeleted:
		what = "VirtualMachine " + vmName(d) + " was deleted outside HyperFleet"
	case "":
		reason = "Ended"
	}
	if c.Status.Phase == hypervisorv1alpha1.MachineFailed && reason != ReasonVMFailed {
		// Failed for good (never Ready in time): the claim's message says why.
		_, msg := conditions.ReadyMessage(c)
		return &ending{reason: reason, what: what + " (" + msg + ")", failed: true}
	}
	return &ending{reason: reason, what: what}
}

// deletionTrouble is why the claim's deletion of its VM has not gone
// through, as the claim's Ready message says it ("… failed, retrying: why"),
// or nil while it goes as it should.
func deletionTrouble(c *hypervisorv1alpha1.MachineClaim) error {
	_, msg := conditions.ReadyMessage(c)
	if _, why, ok := strings.Cut(msg, "failed, retrying"); ok {
		if _, after, found := strings.Cut(why, ": "); found {
			why = after
		}
		return errors.New(why)
	}
	return nil
}

// deskReason is the desk's name for a claim's termination reason.
func deskReason(claimReason string) string {
	switch claimReason {
	case claimExpired:
		return ReasonTimedOut
	case claimShutDown:
		return ReasonGuestShutdown
	case claimMachineFailed:
		return ReasonVMFailed
	case claimDeleted:
		return ReasonVMDeleted
	}
	return claimReason
}

// finalize deletes the desk's claim, whose own finalizer deletes the VM and
// its Secret, then releases the desk; past the deadline it releases it
// anyway with a Warning event, so a claim that cannot go cannot pin a
// deleted desk forever (the claim's own deadline and the orphan sweeper
// then see to the VM).
func (r *Reconciler) finalize(ctx context.Context, s *scope) (skeleton.Result, error) {
	d := s.desk
	c := &hypervisorv1alpha1.MachineClaim{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: d.Name}, c)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return skeleton.Stop(), err
	case !metav1.IsControlledBy(c, d):
		// Somebody else's claim of the same name: not ours to delete.
	default:
		if c.DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, c); client.IgnoreNotFound(err) != nil {
				return skeleton.Stop(), fmt.Errorf("deleting MachineClaim %s: %w", c.Name, err)
			}
		}
		if s.now.Before(skeleton.DeletionDeadline(d, r.FinalizationTimeout)) {
			s.deleteErr = deletionTrouble(c)
			// The claim's deletion wakes the desk (it is owned); the poll
			// only bounds a missed event.
			return skeleton.StopAndRequeue(5 * time.Second), nil
		}
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, "FinalizerDeadlineExceeded", "Delete",
			"Released after %s while MachineClaim %s still deletes VM %s; its own deadline and the orphan sweeper see to the VM", r.FinalizationTimeout, c.Name, vmName(d))
	}
	if hasVM(d) {
		if r.once(d, func(c *counts) *bool { return &c.deleted }) {
			vmDeleted.Inc()
			operationDuration.WithLabelValues("delete").Observe(max(s.now.Sub(d.DeletionTimestamp.Time), 0).Seconds())
			r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "VMDeleted", "Delete", "VirtualMachine %s and its cloud-init Secret deleted", vmName(d))
		}
	}
	if err := s.patch.ReleaseFinalizer(ctx, Finalizer); err != nil {
		return skeleton.Stop(), err
	}
	s.released = true
	return skeleton.Stop(), nil
}

// claimFailed records a failure to act on the claim's VM and how soon to
// retry.
func (s *scope) claimFailed(err error) skeleton.Result {
	if p, ok := providers.IsPermanent(err); ok {
		s.blocked = &blocker{state: conditions.Stalled, reason: p.Reason, message: p.Message}
		return skeleton.StopAndRequeue(30 * time.Second)
	}
	s.blocked = &blocker{state: conditions.Waiting, reason: meta.DependencyNotReadyReason, message: err.Error()}
	return skeleton.StopAndRequeue(max(providers.RetryAfter(err), 5*time.Second))
}

// ended reports whether the desk is over for good.
func ended(d *cyberdeskv1alpha1.Cyberdesk) bool {
	return d.Status.Phase == cyberdeskv1alpha1.CyberdeskTerminated || d.Status.Phase == cyberdeskv1alpha1.CyberdeskFailed
}

// terminal reports whether the claim's machine is gone for good.
func terminal(c *hypervisorv1alpha1.MachineClaim) bool {
	return c.Status.Phase == hypervisorv1alpha1.MachineTerminated || c.Status.Phase == hypervisorv1alpha1.MachineFailed
}

func timeoutMs(d *cyberdeskv1alpha1.Cyberdesk) int64 {
	if d.Spec.TimeoutMs > 0 {
		return d.Spec.TimeoutMs
	}
	return 3600000
}

func statusEqual(a, b *cyberdeskv1alpha1.Cyberdesk) bool {
	return apiequality.Semantic.DeepEqual(a.Status, b.Status)
}
