package machineclaim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// Termination reasons, in status.terminationReason.
const (
	ReasonExpired             = "Expired"
	ReasonShutDown            = "ShutDown"
	ReasonDeleted             = "Deleted"
	ReasonProvisioningTimeout = "ProvisioningTimeout"
)

// pollWhileBusy is how often a machine that is being made or booted is looked at.
const pollWhileBusy = 2 * time.Second

func (r *Reconciler) reconcilePhases(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.claim
	switch c.Status.Phase {
	case hypervisorv1alpha1.MachineTerminated, hypervisorv1alpha1.MachineFailed:
		s.outcome = ended(c)
		return ctrl.Result{}, nil
	case hypervisorv1alpha1.MachineStopping:
		return r.retire(ctx, s)
	}
	if res, stop := r.resolve(ctx, s); stop {
		return res, nil
	}
	if c.Status.ReadyTime == nil {
		if deadline := c.CreationTimestamp.Add(provisioningTimeout(c)); !s.now.Before(deadline) {
			return r.beginRetire(ctx, s, ReasonProvisioningTimeout,
				fmt.Sprintf("the machine was not Ready within spec.provisioningTimeout (%s)", provisioningTimeout(c)))
		}
	}
	if exp := expiry(c); exp != nil && !s.now.Before(exp.Time) {
		return r.beginRetire(ctx, s, ReasonExpired, "the claim's timeout or maxLifetime ran out")
	}
	if c.Status.MachineName == "" {
		if err := r.assignReference(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}
	if c.Status.StartTime == nil {
		if res, wait, err := r.ensureAddress(ctx, s); wait || err != nil {
			return res, err
		}
		return r.provision(ctx, s)
	}
	m, err := s.provider.Observe(ctx, machineRef(c))
	if errors.Is(err, providers.ErrNotFound) {
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "MachineGone", "Observe", "Machine %s disappeared from the hypervisor", c.Status.MachineName)
		return r.finish(s, ReasonDeleted, "the machine was deleted outside HyperFleet")
	}
	if err != nil {
		return r.providerError(s, err)
	}
	return r.evaluate(ctx, s, m)
}

// resolve loads template, cluster and provider. stop reports that the claim
// must wait (its outcome says why).
func (r *Reconciler) resolve(ctx context.Context, s *scope) (ctrl.Result, bool) {
	c := s.claim
	t := &hypervisorv1alpha1.HypervisorMachineTemplate{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.TemplateRef.Name}, t); err != nil {
		if apierrors.IsNotFound(err) {
			s.outcome = pending(conditions.Waiting, meta.DependencyNotFoundReason,
				fmt.Sprintf("HypervisorMachineTemplate %s (spec.templateRef) not found", c.Spec.TemplateRef.Name))
			return ctrl.Result{RequeueAfter: time.Minute}, true
		}
		s.outcome = pending(conditions.Waiting, "TemplateUnreadable", err.Error())
		return ctrl.Result{RequeueAfter: r.backoff.next(c.UID, 0)}, true
	}
	clusterName := c.Status.ClusterName
	if clusterName == "" {
		clusterName = t.Spec.ClusterRef.Name
	}
	cluster := &hypervisorv1alpha1.HypervisorCluster{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: clusterName}, cluster); err != nil {
		s.outcome = pending(conditions.Waiting, meta.DependencyNotFoundReason, fmt.Sprintf("HypervisorCluster %s: %v", clusterName, err))
		return ctrl.Result{RequeueAfter: time.Minute}, true
	}
	p, err := r.Hypervisors.For(ctx, cluster)
	if err != nil {
		s.outcome = pending(conditions.Waiting, meta.DependencyNotReadyReason, fmt.Sprintf("HypervisorCluster %s: %v", clusterName, err))
		return ctrl.Result{RequeueAfter: r.backoff.next(c.UID, time.Minute)}, true
	}
	s.template, s.cluster, s.provider = t, cluster, p
	c.Status.ClusterName, c.Status.Provider = cluster.Name, cluster.Spec.Provider
	return ctrl.Result{}, false
}

// assignReference chooses the machine's name and VMID and writes them to
// status before any create call, so a crash after the call finds the same
// machine instead of making a twin.
func (r *Reconciler) assignReference(ctx context.Context, s *scope) error {
	c := s.claim
	before := c.DeepCopy()
	c.Status.MachineName = machineName(c.Namespace, c.Name)
	if s.cluster.Spec.Provider == hypervisorv1alpha1.ProviderProxmox {
		id := vmidCandidate(c.UID, 0)
		c.Status.VMID = &id
	}
	s.outcome = provisioning("chose machine " + c.Status.MachineName)
	r.setStatus(s)
	return conditions.PatchStatus(ctx, r.Client, before, c)
}

// ensureAddress gives a claim on a static-addressed template its address,
// recorded in status before the machine is created, and resolves the rare
// double assignment of two claims that chose at the same moment.
func (r *Reconciler) ensureAddress(ctx context.Context, s *scope) (ctrl.Result, bool, error) {
	c := s.claim
	pool := staticPool(s.template)
	if len(pool) == 0 {
		return ctrl.Result{}, false, nil
	}
	if c.Status.AssignedAddress != "" && c.Status.ProviderID == "" {
		conflict, err := r.addressConflict(ctx, c)
		if err != nil {
			return ctrl.Result{}, true, err
		}
		if conflict {
			r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "AddressTaken", "Provision",
				"Address %s was also chosen by an older claim; choosing again", c.Status.AssignedAddress)
			c.Status.AssignedAddress = ""
		}
	}
	if c.Status.AssignedAddress != "" {
		return ctrl.Result{}, false, nil
	}
	before := c.DeepCopy()
	if err := r.assignAddress(ctx, c, pool); err != nil {
		s.outcome = pending(conditions.Waiting, "AddressPoolExhausted", err.Error())
		return ctrl.Result{RequeueAfter: 5 * time.Second}, true, nil
	}
	s.outcome = provisioning("took static address " + c.Status.AssignedAddress)
	r.setStatus(s)
	if err := conditions.PatchStatus(ctx, r.Client, before, c); err != nil {
		return ctrl.Result{}, true, err
	}
	// Look again once the write is visible, so a concurrent chooser is seen.
	return ctrl.Result{RequeueAfter: time.Second}, true, nil
}

// provision moves the machine one step on through the provider's Create.
func (r *Reconciler) provision(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.claim
	spec, err := r.Hypervisors.Spec(ctx, s.template, c)
	if err != nil {
		return r.providerError(s, err)
	}
	spec.Ref, spec.Owner = machineRef(c), owner(c)
	spec.Network.IPv4CIDR = c.Status.AssignedAddress
	if ref := c.Spec.UserDataSecretRef; ref != nil {
		data, err := r.userData(ctx, c.Namespace, ref)
		if err != nil {
			s.outcome = pending(conditions.Waiting, meta.SecretNotFoundReason, err.Error())
			return ctrl.Result{RequeueAfter: r.backoff.next(c.UID, 10*time.Second)}, nil
		}
		spec.CloudInit.UserData = data
	}
	m, err := s.provider.Create(ctx, spec)
	if errors.Is(err, providers.ErrNameTaken) && c.Status.VMID != nil {
		old := *c.Status.VMID
		next := vmidCandidate(c.UID, old)
		before := c.DeepCopy()
		c.Status.VMID = &next
		s.outcome = provisioning(fmt.Sprintf("VMID %d belongs to a VM HyperFleet does not own; using %d", old, next))
		r.setStatus(s)
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "VMIDTaken", "Provision", "VMID %d is taken by a VM HyperFleet does not own; trying %d", old, next)
		return ctrl.Result{RequeueAfter: time.Second}, conditions.PatchStatus(ctx, r.Client, before, c)
	}
	if err != nil {
		return r.providerError(s, err)
	}
	r.backoff.reset(c.UID)
	record(c, m)
	if !m.Provisioned || m.State == providers.PowerProvisioning {
		s.outcome = provisioning(m.Progress)
		return ctrl.Result{RequeueAfter: jitter(pollWhileBusy)}, nil
	}
	return r.evaluate(ctx, s, m)
}

// evaluate decides from an observed, provisioned machine.
func (r *Reconciler) evaluate(ctx context.Context, s *scope, m providers.Machine) (ctrl.Result, error) {
	c := s.claim
	record(c, m)
	switch m.State {
	case providers.PowerStopped:
		return r.beginRetire(ctx, s, ReasonShutDown, "the machine powered itself off")
	case providers.PowerFailed:
		return r.beginRetire(ctx, s, ReasonShutDown, "the hypervisor reports the machine failed")
	case providers.PowerProvisioning, providers.PowerUnknown:
		s.outcome = provisioning(m.Progress)
		return ctrl.Result{RequeueAfter: jitter(pollWhileBusy)}, nil
	}
	now := metav1.NewTime(s.now)
	if c.Status.StartTime == nil {
		c.Status.StartTime = &now
	}
	if len(m.Addresses) == 0 {
		s.outcome = outcome{phase: hypervisorv1alpha1.MachineRunning, state: conditions.Progressing, reason: "WaitingForAddress",
			message: "the machine runs; waiting for the guest to report an address"}
		return ctrl.Result{RequeueAfter: jitter(pollWhileBusy)}, nil
	}
	if c.Status.ReadyTime == nil {
		c.Status.ReadyTime = &now
		provisionDuration.WithLabelValues(string(c.Status.Provider)).Observe(s.now.Sub(c.CreationTimestamp.Time).Seconds())
	}
	c.Status.ExpiryTime = expiry(c)
	s.outcome = outcome{phase: hypervisorv1alpha1.MachineReady, state: conditions.Ready, reason: "MachineReady",
		message: fmt.Sprintf("machine %s is ready at %s on %s", c.Status.MachineName, m.Addresses[0], m.Node)}
	next := r.ObserveInterval
	if c.Status.ExpiryTime != nil {
		next = min(next, c.Status.ExpiryTime.Sub(s.now))
	}
	return ctrl.Result{RequeueAfter: max(next, time.Second)}, nil
}

// beginRetire records why the machine ends and starts deleting it.
func (r *Reconciler) beginRetire(ctx context.Context, s *scope, reason, message string) (ctrl.Result, error) {
	c := s.claim
	if c.Status.TerminationReason == "" {
		c.Status.TerminationReason = reason
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Retiring", "Retire", "Retiring machine %s: %s", c.Status.MachineName, message)
	}
	c.Status.Phase = hypervisorv1alpha1.MachineStopping
	return r.retire(ctx, s)
}

// retire deletes the machine; once gone the claim is Terminated (or Failed,
// when it never became Ready in time).
func (r *Reconciler) retire(ctx context.Context, s *scope) (ctrl.Result, error) {
	c := s.claim
	s.outcome = stopping(fmt.Sprintf("deleting machine %s (%s)", c.Status.MachineName, c.Status.TerminationReason))
	if c.Status.MachineName == "" {
		return r.finish(s, c.Status.TerminationReason, "no machine was made")
	}
	err := r.deleteMachine(ctx, s)
	switch {
	case err == nil:
		return r.finish(s, c.Status.TerminationReason, "machine "+c.Status.MachineName+" deleted")
	case errors.Is(err, providers.ErrInProgress):
		return ctrl.Result{RequeueAfter: jitter(pollWhileBusy)}, nil
	}
	s.outcome.message = fmt.Sprintf("deleting machine %s failed, retrying: %v", c.Status.MachineName, err)
	return ctrl.Result{RequeueAfter: r.backoff.next(c.UID, providers.RetryAfter(err))}, nil
}

func (r *Reconciler) finish(s *scope, reason, message string) (ctrl.Result, error) {
	c := s.claim
	c.Status.TerminationReason = reason
	c.Status.Phase = hypervisorv1alpha1.MachineTerminated
	if reason == ReasonProvisioningTimeout {
		c.Status.Phase = hypervisorv1alpha1.MachineFailed
	}
	c.Status.Addresses = nil
	s.outcome = ended(c)
	s.outcome.message = message + "; " + s.outcome.message
	r.backoff.reset(c.UID)
	return ctrl.Result{}, nil
}

// providerError turns a provider failure into the outcome and a retry delay.
func (r *Reconciler) providerError(s *scope, err error) (ctrl.Result, error) {
	c := s.claim
	if p, ok := providers.IsPermanent(err); ok {
		s.outcome = pending(conditions.Stalled, p.Reason, p.Message)
		return ctrl.Result{RequeueAfter: r.backoff.next(c.UID, time.Minute)}, nil
	}
	reason := "HypervisorError"
	var t *providers.TransientError
	if errors.As(err, &t) && t.Reason != "" {
		reason = t.Reason
	}
	phase := c.Status.Phase
	if phase == "" {
		phase = hypervisorv1alpha1.MachinePending
	}
	s.outcome = outcome{phase: phase, state: conditions.Waiting, reason: reason, message: err.Error()}
	if reason == "CloneQueued" {
		// Queueing is expected under a burst: wait the hint, no escalation.
		s.outcome.state = conditions.Progressing
		return ctrl.Result{RequeueAfter: jitter(providers.RetryAfter(err))}, nil
	}
	return ctrl.Result{RequeueAfter: r.backoff.next(c.UID, providers.RetryAfter(err))}, nil
}

// userData reads cloud-init user data from a Secret key (the Secret needs
// the credentials label).
func (r *Reconciler) userData(ctx context.Context, namespace string, ref *meta.SecretKeyReference) (string, error) {
	secret, err := r.Hypervisors.Secret(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, "spec.userDataSecretRef")
	if err != nil {
		if p, ok := providers.IsPermanent(err); ok {
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

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		d = pollWhileBusy
	}
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64())) //nolint:gosec // jitter needs no crypto
}
