package cyberdesk

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// pollWhileBusy paces reconciles while KubeVirt works, in case a VM event
// is missed; events usually come first.
const pollWhileBusy = 2 * time.Second

// observeVM looks at the desk's VM. A desk that has ended is left as it
// is; one that is stopping goes on removing its VM.
func (r *Reconciler) observeVM(ctx context.Context, s *scope) (skeleton.Result, error) {
	d := s.desk
	switch d.Status.Phase {
	case cyberdeskv1alpha1.CyberdeskTerminated, cyberdeskv1alpha1.CyberdeskFailed:
		return skeleton.Stop(), nil
	case cyberdeskv1alpha1.CyberdeskStopping:
		s.retire, _ = conditions.ReadyMessage(d)
		if s.retire == "" {
			s.retire = ReasonTimedOut
		}
		return skeleton.Continue(), nil
	}
	m, err := r.Provider.Observe(ctx, vmRef(d))
	switch {
	case errors.Is(err, providers.ErrNotFound):
		if d.Status.StartTime != nil {
			r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, ReasonVMDeleted, "Observe", "VirtualMachine %s was deleted outside HyperFleet", vmName(d))
			s.ended = &ending{reason: ReasonVMDeleted, what: "VirtualMachine " + vmName(d) + " was deleted outside HyperFleet"}
			return skeleton.Stop(), nil
		}
		s.vmMissing = true
		return skeleton.Continue(), nil
	case err != nil:
		return s.providerFailed(err), nil
	}
	s.machine = &m
	return skeleton.Continue(), nil
}

// createVM renders the template ConfigMap as it is now and makes the VM,
// or finishes making one a crash cut short (not Provisioned: Create has a
// step left, such as starting a VM made halted for its Secret).
func (r *Reconciler) createVM(ctx context.Context, s *scope) (skeleton.Result, error) {
	if !s.vmMissing && (s.machine == nil || s.machine.Provisioned) {
		return skeleton.Continue(), nil
	}
	d := s.desk
	t0 := r.Clock.Now()
	text, source, err := machinespec.TemplateFromConfigMap(ctx, r.APIReader, r.TemplateConfigMap, r.TemplateKey)
	if err != nil {
		return s.providerFailed(err), nil
	}
	m, err := r.Provider.Create(ctx, providers.MachineSpec{
		Ref: vmRef(d), Owner: owner(d),
		CloudInit: providers.CloudInitSpec{UserData: d.Spec.UserData},
		KubeVirt:  &providers.KubeVirtSpec{Template: []byte(text), TemplateSource: source, Variables: machinespec.Variables(d.Name)},
	})
	if errors.Is(err, providers.ErrNameTaken) {
		s.blocked = &blocker{phase: cyberdeskv1alpha1.CyberdeskPending, state: conditions.Stalled, reason: "VMNameTaken",
			message: fmt.Sprintf("VirtualMachine %s exists and does not belong to this Cyberdesk; delete that VM or use another Cyberdesk name", vmName(d))}
		return skeleton.StopAndRequeue(time.Minute), nil
	}
	if err != nil {
		return s.providerFailed(err), nil
	}
	if m.Created {
		vmCreated.Inc()
		operationDuration.WithLabelValues("create").Observe(r.Clock.Since(t0).Seconds())
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "VMCreated", "Create", "Created VirtualMachine %s from %s", vmName(d), source)
		for _, n := range m.Notices {
			r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, ReasonTemplateAdjusted, "Create", "%s: %s", source, n)
		}
	}
	s.machine = &m
	return skeleton.Continue(), nil
}

// followVM follows a VM that exists: the timeout, a guest shutdown, a
// failure; otherwise it looks again soon enough to act at expiry.
func (r *Reconciler) followVM(ctx context.Context, s *scope) (skeleton.Result, error) {
	m := s.machine
	if m == nil || s.retire != "" {
		return skeleton.Continue(), nil
	}
	d := s.desk
	s.started = d.Status.StartTime
	if m.State == providers.PowerRunning && s.started == nil {
		start := metav1.NewTime(s.now)
		s.started = &start
	}
	if s.started != nil {
		expiry := metav1.NewTime(s.started.Add(time.Duration(timeoutMs(d)) * time.Millisecond))
		s.expiry = &expiry
		if !s.now.Before(expiry.Time) {
			return r.expire(ctx, s)
		}
	}
	switch m.State {
	case providers.PowerStopped:
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, ReasonGuestShutdown, "Observe", "The guest of VM %s shut down; removing the VM", vmName(d))
		s.retire = ReasonGuestShutdown
		return skeleton.Continue(), nil
	case providers.PowerFailed:
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, ReasonVMFailed, "Observe", "VM %s failed: %s; removing it", vmName(d), m.Progress)
		s.retire = ReasonVMFailed
		return skeleton.Continue(), nil
	case providers.PowerRunning:
		next := r.ObserveInterval
		if len(m.Addresses) == 0 {
			next = pollWhileBusy
		}
		// Wake exactly at expiry: the timeout is enforced within seconds.
		return skeleton.Requeue(max(min(next, s.expiry.Sub(s.now)), time.Millisecond)), nil
	}
	next := pollWhileBusy
	if s.expiry != nil {
		next = max(min(next, s.expiry.Sub(s.now)), time.Millisecond)
	}
	return skeleton.Requeue(next), nil
}

// expire shuts the VM down at the end of timeoutMs; retireVM removes it.
func (r *Reconciler) expire(ctx context.Context, s *scope) (skeleton.Result, error) {
	d := s.desk
	t0 := r.Clock.Now()
	if err := r.Provider.PowerOff(ctx, vmRef(d), owner(d)); err != nil && !errors.Is(err, providers.ErrNotOwned) {
		return s.providerFailed(err), nil
	}
	if r.countTimeout(d) {
		vmTimeout.Inc()
		operationDuration.WithLabelValues("timeout").Observe(r.Clock.Since(t0).Seconds())
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, ReasonTimedOut, "Timeout",
			"Cyberdesk ran for its timeoutMs (%d); shutting down VM %s", timeoutMs(d), vmName(d))
	}
	s.retire = ReasonTimedOut
	return skeleton.Continue(), nil
}

// retireVM deletes the VM and its Secret; once gone the desk has ended.
func (r *Reconciler) retireVM(ctx context.Context, s *scope) (skeleton.Result, error) {
	if s.retire == "" {
		return skeleton.Continue(), nil
	}
	d := s.desk
	t0 := r.Clock.Now()
	err := r.Provider.Delete(ctx, vmRef(d), owner(d))
	switch {
	case err == nil, errors.Is(err, providers.ErrNotOwned):
		if r.countDelete(d) {
			vmDeleted.Inc()
			operationDuration.WithLabelValues("delete").Observe(r.Clock.Since(t0).Seconds())
		}
		s.ended = &ending{reason: s.retire, what: "VM " + vmName(d) + " deleted"}
		return skeleton.Stop(), nil
	case errors.Is(err, providers.ErrInProgress):
		return skeleton.StopAndRequeue(time.Second), nil
	}
	s.deleteErr = err
	return skeleton.StopAndRequeue(max(providers.RetryAfter(err), 5*time.Second)), nil
}

// providerFailed records a provider failure and how soon to retry.
func (s *scope) providerFailed(err error) skeleton.Result {
	if p, ok := providers.IsPermanent(err); ok {
		s.blocked = &blocker{state: conditions.Stalled, reason: p.Reason, message: p.Message}
		// Retried slowly: the fix (a ConfigMap edit, installing KubeVirt)
		// happens outside and triggers no event on the desk.
		return skeleton.StopAndRequeue(30 * time.Second)
	}
	reason := meta.DependencyNotReadyReason
	var t *providers.TransientError
	if errors.As(err, &t) && t.Reason != "" {
		reason = t.Reason
	}
	s.blocked = &blocker{state: conditions.Waiting, reason: reason, message: err.Error()}
	return skeleton.StopAndRequeue(max(providers.RetryAfter(err), 5*time.Second))
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
