package kubevirtsim

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The functions here compute a VirtualMachine's status from its VMI the way
// KubeVirt's VM controller does (pkg/virt-controller/watch/vm: updateStatus,
// syncConditions, setPrintableStatus), so code written against KubeVirt
// reads the same fields here.

// syncError is a failure to act on a VM, reported in its Failure condition.
type syncError struct {
	reason string
	msg    string
}

func (e *syncError) Error() string { return e.msg }

// Reasons KubeVirt gives in the VM's Failure condition.
const (
	failedCreateReason = "FailedCreate"
	failedDeleteReason = "FailedDelete"
)

// setBasicStatus sets created, ready, the generations, the recorded run
// strategy and trims a state change request that has been served.
func setBasicStatus(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) {
	st := &vm.Status
	st.Created = vmi != nil
	st.Ready = vmi != nil && vmiConditionTrue(vmi, kubevirtv1.VirtualMachineInstanceReady)
	if vmi != nil {
		if gen, err := strconv.ParseInt(vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation], 10, 64); err == nil {
			st.ObservedGeneration = gen
			st.DesiredGeneration = vm.Generation
		}
	}
	// Recorded from the first start on, so RerunOnFailure can tell a VM
	// that already ran from one just switched to it.
	if rs, _ := vm.RunStrategy(); st.RunStrategy != "" || st.Created {
		st.RunStrategy = rs
	}
	if firstRequestServed(vm, vmi) {
		st.StateChangeRequests = st.StateChangeRequests[1:]
	}
}

// firstRequestServed reports whether the first state change request (as
// virt-api writes for `virtctl start/stop`) has been carried out.
func firstRequestServed(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	if len(vm.Status.StateChangeRequests) == 0 {
		return false
	}
	req := vm.Status.StateChangeRequests[0]
	switch req.Action {
	case kubevirtv1.StopRequest:
		return vmi == nil || req.UID == nil || *req.UID != vmi.UID
	case kubevirtv1.StartRequest:
		return vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal()
	}
	return false
}

func hasStartRequest(vm *kubevirtv1.VirtualMachine) bool {
	return len(vm.Status.StateChangeRequests) > 0 && vm.Status.StateChangeRequests[0].Action == kubevirtv1.StartRequest
}

func hasStopRequestFor(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	if len(vm.Status.StateChangeRequests) == 0 || vmi == nil {
		return false
	}
	req := vm.Status.StateChangeRequests[0]
	return req.Action == kubevirtv1.StopRequest && req.UID != nil && *req.UID == vmi.UID
}

// syncConditions sets Ready from the VMI (False with VMINotExists when there
// is none), Failure from syncErr, and mirrors every other VMI condition.
func syncConditions(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, syncErr *syncError, now time.Time) {
	st := &vm.Status
	ready := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady)
	switch {
	case vmi == nil:
		setVMCondition(st, kubevirtv1.VirtualMachineCondition{
			Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
			Reason: "VMINotExists", Message: "VMI does not exist",
			LastProbeTime: stamp(now), LastTransitionTime: stamp(now),
		})
	case ready == nil:
		setVMCondition(st, kubevirtv1.VirtualMachineCondition{
			Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
			Reason: "VMIConditionMissing", Message: "VMI is missing the Ready condition",
			LastProbeTime: stamp(now), LastTransitionTime: stamp(now),
		})
	default:
		setVMCondition(st, kubevirtv1.VirtualMachineCondition{
			Type: kubevirtv1.VirtualMachineReady, Status: ready.Status,
			Reason: ready.Reason, Message: ready.Message,
			LastProbeTime: ready.LastProbeTime, LastTransitionTime: ready.LastTransitionTime,
		})
	}
	if syncErr != nil {
		setVMCondition(st, kubevirtv1.VirtualMachineCondition{
			Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue,
			Reason: syncErr.reason, Message: syncErr.msg, LastTransitionTime: stamp(now),
		})
	} else {
		removeVMCondition(st, kubevirtv1.VirtualMachineFailure)
	}
	if vmi == nil {
		return
	}
	notMirrored := func(t kubevirtv1.VirtualMachineConditionType) bool {
		return t == kubevirtv1.VirtualMachineReady || t == kubevirtv1.VirtualMachineFailure || t == kubevirtv1.VirtualMachineRestartRequired
	}
	onVMI := map[kubevirtv1.VirtualMachineConditionType]bool{}
	for _, c := range vmi.Status.Conditions {
		t := kubevirtv1.VirtualMachineConditionType(c.Type)
		if notMirrored(t) {
			continue
		}
		onVMI[t] = true
		setVMCondition(st, kubevirtv1.VirtualMachineCondition{
			Type: t, Status: c.Status, Reason: c.Reason, Message: c.Message,
			LastProbeTime: c.LastProbeTime, LastTransitionTime: c.LastTransitionTime,
		})
	}
	kept := make([]kubevirtv1.VirtualMachineCondition, 0, len(st.Conditions))
	for _, c := range st.Conditions {
		if notMirrored(c.Type) || onVMI[c.Type] {
			kept = append(kept, c)
		}
	}
	st.Conditions = kept
}

// printableStatus is KubeVirt's human status: the first of these that holds.
// startExpected and stopExpected say a VMI was just created or deleted,
// which the cache may not show yet.
func printableStatus(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, startExpected, stopExpected bool) kubevirtv1.VirtualMachinePrintableStatus {
	rs, _ := vm.RunStrategy()
	paused := vmiConditionTrue(vmi, kubevirtv1.VirtualMachineInstancePaused)
	unschedulable := func() bool {
		c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
	}
	switch {
	case vm.DeletionTimestamp != nil:
		return kubevirtv1.VirtualMachineStatusTerminating
	case vmi != nil && !vmi.IsFinal() && (vmi.DeletionTimestamp != nil || stopExpected):
		return kubevirtv1.VirtualMachineStatusStopping
	case vmi != nil && vmi.IsRunning() && paused:
		return kubevirtv1.VirtualMachineStatusPaused
	case vmi != nil && vmi.IsRunning():
		return kubevirtv1.VirtualMachineStatusRunning
	case unschedulable():
		return kubevirtv1.VirtualMachineStatusUnschedulable
	case vmi == nil && startExpected,
		vmi != nil && (vmi.IsUnprocessed() || vmi.IsScheduling() || vmi.IsScheduled()):
		return kubevirtv1.VirtualMachineStatusStarting
	case (vmi == nil || vmi.IsFinal()) && !startExpected &&
		vm.Status.StartFailure != nil && vm.Status.StartFailure.ConsecutiveFailCount > 0 &&
		(rs == kubevirtv1.RunStrategyAlways || rs == kubevirtv1.RunStrategyRerunOnFailure || rs == kubevirtv1.RunStrategyOnce):
		return kubevirtv1.VirtualMachineStatusCrashLoopBackOff
	case vmi != nil && vmi.IsFinal(), vmi == nil && !startExpected:
		return kubevirtv1.VirtualMachineStatusStopped
	}
	return kubevirtv1.VirtualMachineStatusUnknown
}

// wasRunning reports whether the VMI ever reached Running.
func wasRunning(vmi *kubevirtv1.VirtualMachineInstance) bool {
	if vmi == nil {
		return false
	}
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		if ts.Phase == kubevirtv1.Running {
			return true
		}
	}
	return false
}

// startFailureBackoff is KubeVirt's calculateStartBackoffTime without the
// jitter, in units of unit: failures² units, at most 30 units.
func startFailureBackoff(failures int, unit time.Duration) time.Duration {
	if failures < 1 {
		failures = 1
	}
	maxDelay := 30 * unit
	if failures > 30 {
		return maxDelay
	}
	return min(time.Duration(failures*failures)*unit, maxDelay)
}

// syncStartFailure keeps status.startFailure as KubeVirt does: cleared once a
// VMI reached Running or the run strategy never restarts; counted (with the
// next retry time) when a VMI ended without ever running. The simulator
// keeps the retry time to the nanosecond, since the API keeps seconds.
func (s *Simulator) syncStartFailure(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) {
	key := client.ObjectKeyFromObject(vm)
	s.mu.Lock()
	defer s.mu.Unlock()
	mem := s.startFailures[key]
	if mem != nil && mem.vmUID != vm.UID {
		mem = nil
	}
	rs, err := vm.RunStrategy()
	restarts := err == nil && (rs == kubevirtv1.RunStrategyAlways || rs == kubevirtv1.RunStrategyRerunOnFailure || rs == kubevirtv1.RunStrategyOnce)
	if wasRunning(vmi) || !restarts {
		vm.Status.StartFailure = nil
		delete(s.startFailures, key)
		return
	}
	if mem != nil {
		// Ours is newer than a cache that may not show our last write yet.
		vm.Status.StartFailure = mem.status()
	}
	if vmi == nil || !vmi.IsFinal() {
		return
	}
	prev := vm.Status.StartFailure
	if prev != nil && prev.LastFailedVMIUID == vmi.UID {
		return
	}
	count := 1
	if prev != nil {
		count = prev.ConsecutiveFailCount + 1
	}
	mem = &startFailure{vmUID: vm.UID, vmiUID: vmi.UID, count: count, retryAfter: now.Add(startFailureBackoff(count, s.lat.StartFailureBackoff))}
	s.startFailures[key] = mem
	vm.Status.StartFailure = mem.status()
}

func (f *startFailure) status() *kubevirtv1.VirtualMachineStartFailure {
	retry := stamp(f.retryAfter)
	return &kubevirtv1.VirtualMachineStartFailure{
		ConsecutiveFailCount: f.count,
		LastFailedVMIUID:     f.vmiUID,
		RetryAfterTimestamp:  &retry,
	}
}

// startBackoffLeft is how long the crash-loop backoff still delays the VM's
// next VMI.
func (s *Simulator) startBackoffLeft(vm *kubevirtv1.VirtualMachine, now time.Time) time.Duration {
	s.mu.Lock()
	mem := s.startFailures[client.ObjectKeyFromObject(vm)]
	s.mu.Unlock()
	var retry time.Time
	switch sf := vm.Status.StartFailure; {
	case mem != nil && mem.vmUID == vm.UID:
		retry = mem.retryAfter
	case sf != nil && sf.RetryAfterTimestamp != nil:
		retry = sf.RetryAfterTimestamp.Time
	}
	return max(retry.Sub(now), 0)
}

// newVMIFromVM builds the VMI a VM's template describes, as KubeVirt's
// SetupVMIFromVM and startVMI do: same name and namespace, the template's
// labels, annotations and spec, a controller reference to the VM, the VM
// controller's finalizer, the generation it was started from, a firmware
// UUID stable across restarts and the default pod network when the
// template declares no network.
func newVMIFromVM(vm *kubevirtv1.VirtualMachine) *kubevirtv1.VirtualMachineInstance {
	tmpl := vm.Spec.Template
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:            vm.Name,
			Namespace:       vm.Namespace,
			Labels:          copyMap(tmpl.ObjectMeta.Labels),
			Annotations:     copyMap(tmpl.ObjectMeta.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind)},
			Finalizers:      []string{kubevirtv1.VirtualMachineControllerFinalizer},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	if vmi.Spec.Domain.Firmware == nil {
		vmi.Spec.Domain.Firmware = &kubevirtv1.Firmware{}
	}
	if vmi.Spec.Domain.Firmware.UUID == "" {
		vmi.Spec.Domain.Firmware.UUID = firmwareUUID(vm.Name)
	}
	spec := &vmi.Spec
	autoattach := spec.Domain.Devices.AutoattachPodInterface == nil || *spec.Domain.Devices.AutoattachPodInterface
	if autoattach && len(spec.Networks) == 0 && len(spec.Domain.Devices.Interfaces) == 0 {
		spec.Networks = []kubevirtv1.Network{*kubevirtv1.DefaultPodNetwork()}
		spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{*kubevirtv1.DefaultMasqueradeNetworkInterface()}
	}
	return vmi
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
