package kubevirtsim

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

func TestFailVMIPerRunStrategy(t *testing.T) {
	t.Parallel()
	for _, rs := range []kubevirtv1.VirtualMachineRunStrategy{kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure} {
		t.Run(string(rs)+" restarts", func(t *testing.T) {
			t.Parallel()
			ns := testenv.Namespace(t)
			first := startRunning(t, ns, "vm", rs)
			if err := sim.FailVMI(ns, "vm"); err != nil {
				t.Fatal(err)
			}
			// The VMI had run, so no crash-loop backoff delays the next.
			waitVMI(t, ns, "vm", func(vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
				if vmi.UID == first.UID {
					return false, "still the failed VMI, phase " + string(vmi.Status.Phase)
				}
				return vmiReadyWithIP(vmi)
			})
			vm := waitVM(t, ns, "vm", vmRunningReady)
			if vm.Status.StartFailure != nil {
				t.Errorf("startFailure %+v after a VMI that had run failed", vm.Status.StartFailure)
			}
		})
	}
	t.Run("Once stays Failed", func(t *testing.T) {
		t.Parallel()
		ns := testenv.Namespace(t)
		startRunning(t, ns, "vm", kubevirtv1.RunStrategyOnce)
		if err := sim.FailVMIWithReason(ns, "vm", "OOMKilled", "the guest ran out of memory"); err != nil {
			t.Fatal(err)
		}
		vmi := waitVMI(t, ns, "vm", phaseIs(kubevirtv1.Failed))
		ready := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady)
		if vmi.Status.Reason != "OOMKilled" || ready == nil || ready.Status != corev1.ConditionFalse || ready.Reason != "OOMKilled" {
			t.Errorf("failed VMI reason %q, Ready %+v; want OOMKilled in both", vmi.Status.Reason, ready)
		}
		waitVM(t, ns, "vm", vmPrintable(kubevirtv1.VirtualMachineStatusStopped))
		consistently(t, time.Second, func() (bool, string) {
			got := getVMI(t, ns, "vm")
			return got != nil && got.UID == vmi.UID && got.Status.Phase == kubevirtv1.Failed, "the Once VMI was replaced or changed"
		})
		// Failing it again changes nothing; a missing VMI is an error.
		if err := sim.FailVMI(ns, "vm"); err != nil {
			t.Errorf("FailVMI of a Failed VMI = %v, want nil", err)
		}
		if err := sim.FailVMI(ns, "missing"); err == nil {
			t.Error("FailVMI of a missing VMI succeeded")
		}
	})
}

// A VMI that fails before it ever ran puts the VM into KubeVirt's crash-loop
// backoff: CrashLoopBackOff, a start failure counted, the next VMI later.
func TestFailBeforeRunningBacksOff(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	sim.HangScheduling(ns, "vm")
	create(t, newVM(ns, "vm", kubevirtv1.RunStrategyAlways))
	first := waitVMI(t, ns, "vm", phaseIs(kubevirtv1.Scheduling))
	failedAt := time.Now()
	if err := sim.FailVMI(ns, "vm"); err != nil {
		t.Fatal(err)
	}
	vm := waitVM(t, ns, "vm", vmPrintable(kubevirtv1.VirtualMachineStatusCrashLoopBackOff))
	sf := vm.Status.StartFailure
	if sf == nil || sf.ConsecutiveFailCount != 1 || sf.LastFailedVMIUID != first.UID || sf.RetryAfterTimestamp == nil {
		t.Fatalf("startFailure = %+v, want one failure of %s with a retry time", sf, first.UID)
	}
	second := waitVMI(t, ns, "vm", func(vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
		return vmi.UID != first.UID, "still the failed VMI"
	})
	if waited := time.Since(failedAt); waited < testLatencies.StartFailureBackoff {
		t.Errorf("the next VMI came %s after the failure, before the %s backoff", waited, testLatencies.StartFailureBackoff)
	}
	sim.ReleaseScheduling(ns, "vm")
	waitVMI(t, ns, "vm", func(vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
		if vmi.UID != second.UID {
			return false, "a third VMI appeared"
		}
		return vmiReadyWithIP(vmi)
	})
	// Reaching Running clears the count.
	waitVM(t, ns, "vm", func(vm *kubevirtv1.VirtualMachine) (bool, string) {
		if vm.Status.StartFailure != nil {
			return false, fmt.Sprintf("startFailure %+v kept after the VMI ran", vm.Status.StartFailure)
		}
		return vmRunningReady(vm)
	})
}

func TestHangSchedulingThenRelease(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	sim.HangScheduling(ns, "vm")
	create(t, newVM(ns, "vm", kubevirtv1.RunStrategyAlways))
	waitVM(t, ns, "vm", vmPrintable(kubevirtv1.VirtualMachineStatusUnschedulable))
	vmi := getVMI(t, ns, "vm")
	cond := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
	if vmi.Status.Phase != kubevirtv1.Scheduling || cond == nil || cond.Reason != corev1.PodReasonUnschedulable {
		t.Fatalf("held VMI phase %q PodScheduled %+v, want Scheduling and Unschedulable", vmi.Status.Phase, cond)
	}
	consistently(t, 10*testLatencies.Scheduling, func() (bool, string) {
		got := getVMI(t, ns, "vm")
		return got.Status.Phase == kubevirtv1.Scheduling, "held VMI moved on to " + string(got.Status.Phase)
	})
	sim.ReleaseScheduling(ns, "vm")
	got := waitVMI(t, ns, "vm", vmiReadyWithIP)
	if got.UID != vmi.UID {
		t.Error("release replaced the VMI instead of scheduling it")
	}
	if c := vmiCondition(got, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("PodScheduled after release = %+v, want True", c)
	}
	waitVM(t, ns, "vm", vmRunningReady)
}

// Not parallel: the hold covers every VMI in the cluster.
func TestHangAllScheduling(t *testing.T) {
	ns := testenv.Namespace(t)
	sim.HangAllScheduling(true)
	released := false
	defer func() {
		if !released {
			sim.HangAllScheduling(false)
		}
	}()
	for i := range 3 {
		create(t, newVM(ns, fmt.Sprintf("vm-%d", i), kubevirtv1.RunStrategyAlways))
	}
	for i := range 3 {
		waitVM(t, ns, fmt.Sprintf("vm-%d", i), vmPrintable(kubevirtv1.VirtualMachineStatusUnschedulable))
	}
	sim.HangAllScheduling(false)
	released = true
	for i := range 3 {
		waitVMI(t, ns, fmt.Sprintf("vm-%d", i), vmiReadyWithIP)
	}
}
