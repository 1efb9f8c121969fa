package kubevirtsim

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrWrongPhase is returned by a fault that does not apply to the VMI's
// current phase, such as GuestShutdown of a VMI that is not Running.
var ErrWrongPhase = errors.New("not in a phase this fault applies to")

// Reason and message FailVMI writes: what KubeVirt reports when the
// virt-launcher pod dies under a VMI.
const (
	FailureReason  = "VirtLauncherCrashed"
	failureMessage = "virt-launcher pod terminated unexpectedly (injected by kubevirtsim)"
)

// faultRetry outlasts a burst of conflicts with the simulator's own
// controllers, which write the same VMI.
var faultRetry = wait.Backoff{Steps: 12, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.2}

// FailVMI fails the VMI of the VM (or the standalone VMI) with this name, as
// when its virt-launcher pod crashes: phase Failed, status.reason and the
// Ready condition's reason FailureReason. The VM controller then acts as
// KubeVirt does: Always and RerunOnFailure start a new VMI (after the
// crash-loop backoff if the VMI never reached Running), Once leaves it
// Failed. Failing a Failed VMI does nothing; a Succeeded one is
// ErrWrongPhase.
func (s *Simulator) FailVMI(namespace, name string) error {
	return s.FailVMIWithReason(namespace, name, FailureReason, failureMessage)
}

// FailVMIWithReason is FailVMI with a chosen reason and message, for tests
// that tell failures apart.
func (s *Simulator) FailVMIWithReason(namespace, name, reason, message string) error {
	changed, err := s.mutateVMIStatus(types.NamespacedName{Namespace: namespace, Name: name}, func(vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (bool, error) {
		switch vmi.Status.Phase {
		case kubevirtv1.Failed:
			return false, nil
		case kubevirtv1.Succeeded:
			return false, fmt.Errorf("%w: it is Succeeded", ErrWrongPhase)
		}
		setPhase(&vmi.Status, kubevirtv1.Failed, now)
		vmi.Status.Reason = reason
		guestGone(&vmi.Status, reason, message, now)
		return true, nil
	})
	if changed {
		s.counters.failures.Add(1)
	}
	return err
}

// GuestShutdown powers the guest of a Running VMI off from inside, as
// `poweroff` in the VM does: the VMI becomes Succeeded. The VM controller
// then restarts it under Always and leaves the VM Stopped under
// RerunOnFailure, Once and Manual. A VMI in any other phase is
// ErrWrongPhase.
func (s *Simulator) GuestShutdown(namespace, name string) error {
	changed, err := s.mutateVMIStatus(types.NamespacedName{Namespace: namespace, Name: name}, func(vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (bool, error) {
		if vmi.Status.Phase != kubevirtv1.Running {
			return false, fmt.Errorf("%w: it is %q, not Running", ErrWrongPhase, vmi.Status.Phase)
		}
		setPhase(&vmi.Status, kubevirtv1.Succeeded, now)
		guestGone(&vmi.Status, kubevirtv1.GuestNotRunningReason, "Guest VM shut itself down", now)
		return true, nil
	})
	if changed {
		s.counters.shutdowns.Add(1)
	}
	return err
}

// HangScheduling holds the VMI of this VM (or this standalone VMI) in
// Scheduling, the current one and every later one, until
// ReleaseScheduling: no node fits it. After the Scheduling latency the VMI
// shows PodScheduled=False with reason Unschedulable, so the VM's
// printableStatus becomes ErrorUnschedulable, as in a full cluster.
func (s *Simulator) HangScheduling(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds[types.NamespacedName{Namespace: namespace, Name: name}] = true
}

// ReleaseScheduling ends HangScheduling for this name; a VMI waiting in
// Scheduling is scheduled at once.
func (s *Simulator) ReleaseScheduling(namespace, name string) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	s.mu.Lock()
	delete(s.holds, key)
	s.mu.Unlock()
	s.kick(key)
}

// HangAllScheduling holds every VMI in Scheduling while hang is true, as a
// cluster without free capacity does; false releases those not held by
// HangScheduling.
func (s *Simulator) HangAllScheduling(hang bool) {
	s.mu.Lock()
	s.holdAll = hang
	s.mu.Unlock()
	if hang {
		return
	}
	list := &kubevirtv1.VirtualMachineInstanceList{}
	if err := s.client.List(s.ctx, list); err != nil {
		s.log.Error(err, "Listing VMIs to release from Scheduling")
		return
	}
	for i := range list.Items {
		if list.Items[i].Status.Phase == kubevirtv1.Scheduling {
			s.kick(client.ObjectKeyFromObject(&list.Items[i]))
		}
	}
}

// mutateVMIStatus applies mutate to the VMI as the API server has it and
// writes the status, retrying on conflicts with the controllers. mutate
// reports whether it changed anything; so does mutateVMIStatus.
func (s *Simulator) mutateVMIStatus(key types.NamespacedName, mutate func(*kubevirtv1.VirtualMachineInstance, time.Time) (bool, error)) (bool, error) {
	ctx, cancel := context.WithTimeout(s.ctx, faultTimeout)
	defer cancel()
	var changed bool
	err := retry.RetryOnConflict(faultRetry, func() error {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := s.reader.Get(ctx, key, vmi); err != nil {
			return err
		}
		base := vmi.DeepCopy()
		var err error
		if changed, err = mutate(vmi, time.Now()); err != nil || !changed {
			return err
		}
		return s.client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return false, fmt.Errorf("kubevirtsim: VMI %s: %w", key, err)
	}
	return changed, nil
}

// guestGone records that the guest is no longer running: Ready turns False
// with reason, the guest agent disconnects.
func guestGone(st *kubevirtv1.VirtualMachineInstanceStatus, reason, message string, now time.Time) {
	setVMICondition(st, kubevirtv1.VirtualMachineInstanceCondition{
		Type:    kubevirtv1.VirtualMachineInstanceReady,
		Status:  corev1.ConditionFalse,
		Reason:  reason,
		Message: message,
	}, now)
	removeVMICondition(st, kubevirtv1.VirtualMachineInstanceAgentConnected)
}

// Stats counts what the simulator did since Start and what exists now, for
// tests and benchmarks.
type Stats struct {
	// VMIsCreated counts VMIs created for VMs.
	VMIsCreated int
	// VMIsDeleted counts VMIs the simulator deleted: stops, restarts, VM
	// deletions and garbage collection.
	VMIsDeleted int
	// VMIsGarbageCollected counts, among those, VMIs deleted because every
	// VM owning them was gone.
	VMIsGarbageCollected int
	// Restarts counts Failed or Succeeded VMIs deleted to be replaced
	// (Always, RerunOnFailure after a failure).
	Restarts int
	// Failures counts VMIs failed by FailVMI.
	Failures int
	// GuestShutdowns counts guests shut down by GuestShutdown.
	GuestShutdowns int
	// Scheduled counts VMIs placed on a node.
	Scheduled int
	// Booted counts guests that finished booting (Ready with an IP).
	Booted int

	// VMs and VMIs are the numbers that exist now.
	VMs, VMIs int
	// Phases counts the existing VMIs by phase ("" for not yet processed).
	Phases map[kubevirtv1.VirtualMachineInstancePhase]int
	// Running counts VMIs in phase Running, Ready those whose Ready
	// condition is True.
	Running, Ready int
	// NodeLoad counts the VMIs holding each node.
	NodeLoad map[string]int
}

// Stats returns the counters and a count of the objects in the simulator's
// cache.
func (s *Simulator) Stats() Stats {
	st := Stats{
		VMIsCreated:          int(s.counters.created.Load()),
		VMIsDeleted:          int(s.counters.deleted.Load()),
		VMIsGarbageCollected: int(s.counters.collected.Load()),
		Restarts:             int(s.counters.restarts.Load()),
		Failures:             int(s.counters.failures.Load()),
		GuestShutdowns:       int(s.counters.shutdowns.Load()),
		Scheduled:            int(s.counters.scheduled.Load()),
		Booted:               int(s.counters.booted.Load()),
		Phases:               map[kubevirtv1.VirtualMachineInstancePhase]int{},
	}
	vms := &kubevirtv1.VirtualMachineList{}
	if err := s.client.List(s.ctx, vms); err == nil {
		st.VMs = len(vms.Items)
	}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := s.client.List(s.ctx, vmis); err == nil {
		st.VMIs = len(vmis.Items)
		for i := range vmis.Items {
			vmi := &vmis.Items[i]
			st.Phases[vmi.Status.Phase]++
			if vmi.Status.Phase == kubevirtv1.Running {
				st.Running++
			}
			if vmiConditionTrue(vmi, kubevirtv1.VirtualMachineInstanceReady) {
				st.Ready++
			}
		}
	}
	s.mu.Lock()
	st.NodeLoad = s.nodeLoadLocked()
	s.mu.Unlock()
	return st
}
