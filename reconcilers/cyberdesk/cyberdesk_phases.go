package cyberdesk

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
)

const (
	stateStopping = conditions.Progressing
	// pollWhileBusy paces reconciles while KubeVirt works, in case a VM
	// event is missed; events usually come first.
	pollWhileBusy = 2 * time.Second
)

// reconcilePhases moves the desk one step: make the VM, follow it, end it.
// Every step starts from what exists (the VM, its instance) and what status
// records, so a duplicate event or a restart repeats nothing.
func (r *Reconciler) reconcilePhases(ctx context.Context, s *scope) (ctrl.Result, error) {
	d := s.desk
	if d.Status.VirtualMachineRef == nil {
		// The name is fixed by the desk's name, so recording it first
		// costs nothing and tells kubectl users where to look.
		d.Status.VirtualMachineRef = &cyberdeskv1alpha1.VirtualMachineReference{Name: vmName(d), Namespace: d.Namespace}
	}
	switch d.Status.Phase {
	case cyberdeskv1alpha1.CyberdeskTerminated, cyberdeskv1alpha1.CyberdeskFailed:
		s.outcome = ended(d)
		return ctrl.Result{}, nil
	case cyberdeskv1alpha1.CyberdeskStopping:
		reason, _ := conditions.ReadyMessage(d)
		return r.retire(ctx, s, reason)
	}
	m, err := r.Provider.Observe(ctx, vmRef(d))
	switch {
	case errors.Is(err, providers.ErrNotFound):
		if d.Status.StartTime != nil {
			r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, ReasonVMDeleted, "Observe", "VirtualMachine %s was deleted outside HyperFleet", vmName(d))
			return r.end(s, ReasonVMDeleted, "VirtualMachine "+vmName(d)+" was deleted outside HyperFleet")
		}
		return r.create(ctx, s)
	case err != nil:
		return r.providerError(s, err)
	}
	return r.evaluate(ctx, s, m)
}

// create renders the template ConfigMap as it is now and makes the VM.
func (r *Reconciler) create(ctx context.Context, s *scope) (ctrl.Result, error) {
	d := s.desk
	t0 := r.Clock.Now()
	text, source, err := machinespec.TemplateFromConfigMap(ctx, r.APIReader, r.TemplateConfigMap, r.TemplateKey)
	if err != nil {
		return r.providerError(s, err)
	}
	m, err := r.Provider.Create(ctx, providers.MachineSpec{
		Ref: vmRef(d), Owner: owner(d),
		CloudInit: providers.CloudInitSpec{UserData: d.Spec.UserData},
		KubeVirt:  &providers.KubeVirtSpec{Template: []byte(text), TemplateSource: source},
	})
	if errors.Is(err, providers.ErrNameTaken) {
		s.outcome = outcome{phase: cyberdeskv1alpha1.CyberdeskPending, state: conditions.Stalled, reason: "VMNameTaken",
			message: fmt.Sprintf("VirtualMachine %s exists and does not belong to this Cyberdesk; delete that VM or use another Cyberdesk name", vmName(d))}
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	if err != nil {
		return r.providerError(s, err)
	}
	if m.Created {
		vmCreated.Inc()
		operationDuration.WithLabelValues("create").Observe(r.Clock.Since(t0).Seconds())
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "VMCreated", "Create", "Created VirtualMachine %s from %s", vmName(d), source)
	}
	return r.evaluate(ctx, s, m)
}

// evaluate follows a VM that exists.
func (r *Reconciler) evaluate(ctx context.Context, s *scope, m providers.Machine) (ctrl.Result, error) {
	d := s.desk
	if m.UID != "" {
		d.Status.VirtualMachineRef.UID = m.UID
	}
	if m.Node != "" {
		d.Status.NodeName = m.Node
	}
	if len(m.Addresses) > 0 {
		d.Status.IPAddress = m.Addresses[0]
	}
	if m.State == providers.PowerRunning && d.Status.StartTime == nil {
		start := metav1.NewTime(s.now)
		d.Status.StartTime = &start
	}
	if d.Status.StartTime != nil {
		expiry := metav1.NewTime(d.Status.StartTime.Add(time.Duration(timeoutMs(d)) * time.Millisecond))
		d.Status.ExpiryTime = &expiry
		if !s.now.Before(expiry.Time) {
			return r.expire(ctx, s)
		}
	}
	switch m.State {
	case providers.PowerStopped:
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, ReasonGuestShutdown, "Observe", "The guest of VM %s shut down; removing the VM", vmName(d))
		return r.retire(ctx, s, ReasonGuestShutdown)
	case providers.PowerFailed:
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, ReasonVMFailed, "Observe", "VM %s failed: %s; removing it", vmName(d), m.Progress)
		return r.retire(ctx, s, ReasonVMFailed)
	case providers.PowerRunning:
		msg := fmt.Sprintf("VM %s runs on %s", vmName(d), m.Node)
		if d.Status.IPAddress != "" {
			msg += " at " + d.Status.IPAddress
		}
		s.outcome = outcome{phase: cyberdeskv1alpha1.CyberdeskRunning, state: conditions.Ready, reason: "Running", message: msg}
		next := r.ObserveInterval
		if len(m.Addresses) == 0 {
			next = pollWhileBusy
		}
		// Wake exactly at expiry: the timeout is enforced within seconds.
		return ctrl.Result{RequeueAfter: max(min(next, d.Status.ExpiryTime.Sub(s.now)), time.Millisecond)}, nil
	}
	s.outcome = outcome{phase: cyberdeskv1alpha1.CyberdeskProvisioning, state: conditions.Progressing, reason: "Provisioning",
		message: fmt.Sprintf("VM %s: %s", vmName(d), m.Progress)}
	next := pollWhileBusy
	if d.Status.ExpiryTime != nil {
		next = max(min(next, d.Status.ExpiryTime.Sub(s.now)), time.Millisecond)
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// expire shuts the VM down at the end of timeoutMs, then removes it.
func (r *Reconciler) expire(ctx context.Context, s *scope) (ctrl.Result, error) {
	d := s.desk
	t0 := r.Clock.Now()
	if err := r.Provider.PowerOff(ctx, vmRef(d), owner(d)); err != nil && !errors.Is(err, providers.ErrNotOwned) {
		return r.providerError(s, err)
	}
	if r.countOnce("timeout", d) {
		vmTimeout.Inc()
		operationDuration.WithLabelValues("timeout").Observe(r.Clock.Since(t0).Seconds())
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, ReasonTimedOut, "Timeout",
			"Cyberdesk ran for its timeoutMs (%d); shutting down VM %s", timeoutMs(d), vmName(d))
	}
	return r.retire(ctx, s, ReasonTimedOut)
}

// retire deletes the VM and its Secret; once gone the desk has ended.
func (r *Reconciler) retire(ctx context.Context, s *scope, reason string) (ctrl.Result, error) {
	d := s.desk
	if reason == "" {
		reason = ReasonTimedOut
	}
	s.outcome = outcome{phase: cyberdeskv1alpha1.CyberdeskStopping, state: stateStopping, reason: reason,
		message: fmt.Sprintf("shutting down and deleting VM %s (%s)", vmName(d), reason)}
	t0 := r.Clock.Now()
	err := r.Provider.Delete(ctx, vmRef(d), owner(d))
	switch {
	case err == nil, errors.Is(err, providers.ErrNotOwned):
		if r.countOnce("delete", d) {
			vmDeleted.Inc()
			operationDuration.WithLabelValues("delete").Observe(r.Clock.Since(t0).Seconds())
		}
		return r.end(s, reason, "VM "+vmName(d)+" deleted")
	case errors.Is(err, providers.ErrInProgress):
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	s.outcome.message = fmt.Sprintf("deleting VM %s failed, retrying: %v", vmName(d), err)
	return ctrl.Result{RequeueAfter: max(providers.RetryAfter(err), 5*time.Second)}, nil
}

// end records the desk's end: Terminated, or Failed when its VM failed.
func (r *Reconciler) end(s *scope, reason, what string) (ctrl.Result, error) {
	d := s.desk
	d.Status.Phase = cyberdeskv1alpha1.CyberdeskTerminated
	advice, state := "the desktop has ended; delete the Cyberdesk when its record is no longer needed", conditions.Finished
	if reason == ReasonVMFailed {
		d.Status.Phase = cyberdeskv1alpha1.CyberdeskFailed
		advice, state = "the desktop's VM failed; delete the Cyberdesk and create a new one (kubectl get events shows why)", conditions.Stalled
	}
	d.Status.IPAddress = ""
	s.outcome = outcome{phase: d.Status.Phase, state: state, reason: reason, message: what + "; " + advice}
	return ctrl.Result{}, nil
}

// ended is the outcome of a desk that is over: what the Ready condition
// already says, stamped with the current generation.
func ended(d *cyberdeskv1alpha1.Cyberdesk) outcome {
	reason, msg := conditions.ReadyMessage(d)
	if reason == "" {
		reason, msg = "Ended", "the desktop has ended"
	}
	if d.Status.Phase == cyberdeskv1alpha1.CyberdeskFailed {
		return outcome{phase: d.Status.Phase, state: conditions.Stalled, reason: reason, message: msg}
	}
	return outcome{phase: d.Status.Phase, state: conditions.Finished, reason: reason, message: msg}
}

// providerError turns a provider failure into the outcome and a retry delay.
func (r *Reconciler) providerError(s *scope, err error) (ctrl.Result, error) {
	d := s.desk
	phase := d.Status.Phase
	if phase == "" {
		phase = cyberdeskv1alpha1.CyberdeskPending
	}
	if p, ok := providers.IsPermanent(err); ok {
		s.outcome = outcome{phase: phase, state: conditions.Stalled, reason: p.Reason, message: p.Message}
		// Retried slowly: the fix (a ConfigMap edit, installing KubeVirt)
		// happens outside and triggers no event on the desk.
		return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
	}
	reason := meta.DependencyNotReadyReason
	var t *providers.TransientError
	if errors.As(err, &t) && t.Reason != "" {
		reason = t.Reason
	}
	s.outcome = outcome{phase: phase, state: conditions.Waiting, reason: reason, message: err.Error()}
	return ctrl.Result{RequeueAfter: max(providers.RetryAfter(err), 5*time.Second)}, nil
}

func timeoutMs(d *cyberdeskv1alpha1.Cyberdesk) int64 {
	if d.Spec.TimeoutMs > 0 {
		return d.Spec.TimeoutMs
	}
	return 3600000
}

// patchStatus writes the status unless nothing changed.
func patchStatus(ctx context.Context, c client.Client, before, after *cyberdeskv1alpha1.Cyberdesk) error {
	if statusEqual(before, after) {
		return nil
	}
	return conditions.PatchStatus(ctx, c, before, after)
}

func statusEqual(a, b *cyberdeskv1alpha1.Cyberdesk) bool {
	return apiequality.Semantic.DeepEqual(a.Status, b.Status)
}
