package kubevirtsim

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// The helpers below follow KubeVirt's condition managers: a condition is
// replaced only when its status, reason or message changes, so timestamps
// do not churn and an unchanged status is never written.

func setVMICondition(st *kubevirtv1.VirtualMachineInstanceStatus, c kubevirtv1.VirtualMachineInstanceCondition, now time.Time) {
	for i := range st.Conditions {
		old := &st.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			} else {
				c.LastTransitionTime = stamp(now)
			}
			*old = c
		}
		return
	}
	c.LastTransitionTime = stamp(now)
	st.Conditions = append(st.Conditions, c)
}

func removeVMICondition(st *kubevirtv1.VirtualMachineInstanceStatus, t kubevirtv1.VirtualMachineInstanceConditionType) {
	kept := st.Conditions[:0]
	for _, c := range st.Conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	st.Conditions = kept
}

func vmiCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) *kubevirtv1.VirtualMachineInstanceCondition {
	if vmi == nil {
		return nil
	}
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func vmiConditionTrue(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) bool {
	c := vmiCondition(vmi, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// setVMCondition replaces the condition when its status, reason or message
// changed, keeping the timestamps given in c (KubeVirt copies them from the
// VMI).
func setVMCondition(st *kubevirtv1.VirtualMachineStatus, c kubevirtv1.VirtualMachineCondition) {
	for i := range st.Conditions {
		old := &st.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message {
			*old = c
		}
		return
	}
	st.Conditions = append(st.Conditions, c)
}

func removeVMCondition(st *kubevirtv1.VirtualMachineStatus, t kubevirtv1.VirtualMachineConditionType) {
	kept := st.Conditions[:0]
	for _, c := range st.Conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	st.Conditions = kept
}

func vmConditionTrue(vm *kubevirtv1.VirtualMachine, t kubevirtv1.VirtualMachineConditionType) bool {
	for _, c := range vm.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setPhase moves a VMI to phase and records the transition time, as
// virt-controller and virt-handler do.
func setPhase(st *kubevirtv1.VirtualMachineInstanceStatus, phase kubevirtv1.VirtualMachineInstancePhase, now time.Time) {
	st.Phase = phase
	st.PhaseTransitionTimestamps = append(st.PhaseTransitionTimestamps, kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
		Phase:                    phase,
		PhaseTransitionTimestamp: stamp(now),
	})
}
