package kubevirtsim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

func TestVMAlwaysRunsAVMIWithIPAndNode(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	vm := newVM(ns, "web", kubevirtv1.RunStrategyAlways)
	create(t, vm)

	vmi := waitVMI(t, ns, "web", vmiReadyWithIP)
	if !slices.Contains(sim.opts.Nodes, vmi.Status.NodeName) {
		t.Errorf("nodeName %q is not a simulated node", vmi.Status.NodeName)
	}
	if got := vmi.Labels[kubevirtv1.NodeNameLabel]; got != vmi.Status.NodeName {
		t.Errorf("label %s = %q, want the node %q", kubevirtv1.NodeNameLabel, got, vmi.Status.NodeName)
	}
	iface := vmi.Status.Interfaces[0]
	if iface.Name != "default" || iface.InterfaceName != "eth0" || !strings.HasPrefix(iface.IP, "10.244.") ||
		!slices.Equal(iface.IPs, []string{iface.IP}) || !strings.HasPrefix(iface.MAC, "52:54:00:") {
		t.Errorf("interface = %+v, want default/eth0 with a 10.244.x.y address and a MAC", iface)
	}
	if !vmiConditionTrue(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected) || vmi.Status.GuestOSInfo.ID == "" {
		t.Errorf("guest agent not reported: conditions %v, guestOSInfo %+v", vmi.Status.Conditions, vmi.Status.GuestOSInfo)
	}
	var phases []kubevirtv1.VirtualMachineInstancePhase
	for _, ts := range vmi.Status.PhaseTransitionTimestamps {
		phases = append(phases, ts.Phase)
	}
	if want := []kubevirtv1.VirtualMachineInstancePhase{kubevirtv1.Pending, kubevirtv1.Scheduling, kubevirtv1.Scheduled, kubevirtv1.Running}; !slices.Equal(phases, want) {
		t.Errorf("phase transitions %v, want %v", phases, want)
	}

	// What KubeVirt's VM controller puts on the VMI it creates.
	ref := metav1.GetControllerOf(vmi)
	fresh := getVM(t, ns, "web")
	if ref == nil || ref.UID != fresh.UID || ref.Kind != "VirtualMachine" || ref.APIVersion != "kubevirt.io/v1" ||
		ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("controller reference %+v, want the VM with blockOwnerDeletion", ref)
	}
	for _, f := range []string{kubevirtv1.VirtualMachineControllerFinalizer, kubevirtv1.VirtualMachineInstanceFinalizer} {
		if !slices.Contains(vmi.Finalizers, f) {
			t.Errorf("VMI finalizers %v lack %s", vmi.Finalizers, f)
		}
	}
	if vmi.Labels["hyperfleet.io/owner"] != "test" || vmi.Annotations["hyperfleet.io/note"] != "from the template" {
		t.Errorf("template metadata not copied: labels %v annotations %v", vmi.Labels, vmi.Annotations)
	}
	if vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation] != "1" {
		t.Errorf("generation annotation = %q, want 1", vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation])
	}
	if vmi.Spec.Domain.Firmware == nil || vmi.Spec.Domain.Firmware.UUID != firmwareUUID("web") {
		t.Errorf("firmware = %+v, want the stable UUID %s", vmi.Spec.Domain.Firmware, firmwareUUID("web"))
	}
	if len(vmi.Spec.Volumes) != 1 || vmi.Spec.Volumes[0].ContainerDisk == nil {
		t.Errorf("template spec not copied: volumes %+v", vmi.Spec.Volumes)
	}

	got := waitVM(t, ns, "web", vmRunningReady)
	if !got.Status.Created || got.Status.RunStrategy != kubevirtv1.RunStrategyAlways ||
		got.Status.ObservedGeneration != 1 || got.Status.DesiredGeneration != 1 {
		t.Errorf("VM status = %+v", got.Status)
	}
	if !slices.Contains(got.Finalizers, kubevirtv1.VirtualMachineControllerFinalizer) {
		t.Errorf("VM finalizers %v lack %s", got.Finalizers, kubevirtv1.VirtualMachineControllerFinalizer)
	}
	conds := map[kubevirtv1.VirtualMachineConditionType]corev1.ConditionStatus{}
	for _, c := range got.Status.Conditions {
		conds[c.Type] = c.Status
	}
	if conds[kubevirtv1.VirtualMachineReady] != corev1.ConditionTrue ||
		conds[kubevirtv1.VirtualMachineConditionType(kubevirtv1.VirtualMachineInstanceAgentConnected)] != corev1.ConditionTrue {
		t.Errorf("VM conditions %v, want Ready and AgentConnected True (mirrored from the VMI)", got.Status.Conditions)
	}
}

func TestLegacyRunningField(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	vm := newVM(ns, "legacy", "")
	vm.Spec.RunStrategy = nil
	vm.Spec.Running = ptr.To(true)
	create(t, vm)
	waitVMI(t, ns, "legacy", vmiReadyWithIP)
	waitVM(t, ns, "legacy", vmRunningReady)

	updateVM(t, ns, "legacy", func(vm *kubevirtv1.VirtualMachine) { vm.Spec.Running = ptr.To(false) })
	waitGone(t, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"}})
	waitVM(t, ns, "legacy", vmPrintable(kubevirtv1.VirtualMachineStatusStopped))
}

func TestStopThenStartAgain(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	first := startRunning(t, ns, "box", kubevirtv1.RunStrategyAlways)

	setRunStrategy(t, ns, "box", kubevirtv1.RunStrategyHalted)
	waitGone(t, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "box"}})
	// The VM reads Stopped already while its VMI is Succeeded; wait for
	// the status that says the VMI is gone.
	stopped := waitVM(t, ns, "box", func(vm *kubevirtv1.VirtualMachine) (bool, string) {
		if vm.Status.Created {
			return false, "status still shows the VMI"
		}
		return vmPrintable(kubevirtv1.VirtualMachineStatusStopped)(vm)
	})
	if stopped.Status.Ready {
		t.Error("stopped VM is ready")
	}
	for _, c := range stopped.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineReady && (c.Status != corev1.ConditionFalse || c.Reason != "VMINotExists") {
			t.Errorf("stopped VM Ready condition %+v, want False/VMINotExists", c)
		}
		if c.Type == kubevirtv1.VirtualMachineConditionType(kubevirtv1.VirtualMachineInstanceAgentConnected) {
			t.Errorf("stopped VM still mirrors %+v", c)
		}
	}

	setRunStrategy(t, ns, "box", kubevirtv1.RunStrategyAlways)
	second := waitVMI(t, ns, "box", vmiReadyWithIP)
	if second.UID == first.UID {
		t.Fatal("the VM runs the same VMI after stop and start")
	}
	waitVM(t, ns, "box", vmRunningReady)
}

func TestGuestShutdownPerRunStrategy(t *testing.T) {
	t.Parallel()
	t.Run("Always restarts", func(t *testing.T) {
		t.Parallel()
		ns := testenv.Namespace(t)
		first := startRunning(t, ns, "vm", kubevirtv1.RunStrategyAlways)
		if err := sim.GuestShutdown(ns, "vm"); err != nil {
			t.Fatal(err)
		}
		second := waitVMI(t, ns, "vm", func(vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
			if vmi.UID == first.UID {
				return false, "still the first VMI, phase " + string(vmi.Status.Phase)
			}
			return vmiReadyWithIP(vmi)
		})
		if second.Status.Interfaces[0].IP == first.Status.Interfaces[0].IP {
			t.Errorf("the restarted VMI got the same address %s; addresses are handed out in order", first.Status.Interfaces[0].IP)
		}
		waitVM(t, ns, "vm", vmRunningReady)
	})
	t.Run("RerunOnFailure stays stopped", func(t *testing.T) {
		t.Parallel()
		ns := testenv.Namespace(t)
		startRunning(t, ns, "vm", kubevirtv1.RunStrategyRerunOnFailure)
		if err := sim.GuestShutdown(ns, "vm"); err != nil {
			t.Fatal(err)
		}
		// KubeVirt deletes the Succeeded VMI and does not start another.
		waitGone(t, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}})
		waitVM(t, ns, "vm", vmPrintable(kubevirtv1.VirtualMachineStatusStopped))
		consistently(t, time.Second, func() (bool, string) {
			if vmi := getVMI(t, ns, "vm"); vmi != nil {
				return false, "a VMI was started again, phase " + string(vmi.Status.Phase)
			}
			return true, ""
		})
	})
	for _, rs := range []kubevirtv1.VirtualMachineRunStrategy{kubevirtv1.RunStrategyOnce, kubevirtv1.RunStrategyManual} {
		t.Run(string(rs)+" keeps the Succeeded VMI", func(t *testing.T) {
			t.Parallel()
			ns := testenv.Namespace(t)
			if rs == kubevirtv1.RunStrategyManual {
				// Manual starts only on request, as `virtctl start` asks.
				create(t, newVM(ns, "vm", rs))
				waitVM(t, ns, "vm", vmPrintable(kubevirtv1.VirtualMachineStatusStopped))
				requestStart(t, ns, "vm")
				waitVMI(t, ns, "vm", vmiReadyWithIP)
			} else {
				startRunning(t, ns, "vm", rs)
			}
			if err := sim.GuestShutdown(ns, "vm"); err != nil {
				t.Fatal(err)
			}
			vm := waitVM(t, ns, "vm", vmPrintable(kubevirtv1.VirtualMachineStatusStopped))
			if vm.Status.Ready {
				t.Error("VM ready after its guest shut down")
			}
			consistently(t, time.Second, func() (bool, string) {
				vmi := getVMI(t, ns, "vm")
				if vmi == nil || vmi.Status.Phase != kubevirtv1.Succeeded {
					return false, fmt.Sprintf("VMI %v, want it kept Succeeded", vmi)
				}
				return true, ""
			})
			if vmi := getVMI(t, ns, "vm"); len(vmi.Finalizers) != 0 {
				t.Errorf("a finished VMI keeps finalizers %v", vmi.Finalizers)
			}
		})
	}
}

func TestGuestShutdownNeedsARunningVMI(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	sim.HangScheduling(ns, "vm")
	defer sim.ReleaseScheduling(ns, "vm")
	create(t, newVM(ns, "vm", kubevirtv1.RunStrategyAlways))
	waitVMI(t, ns, "vm", phaseIs(kubevirtv1.Scheduling))
	if err := sim.GuestShutdown(ns, "vm"); !errors.Is(err, ErrWrongPhase) {
		t.Errorf("GuestShutdown of a Scheduling VMI = %v, want ErrWrongPhase", err)
	}
	if err := sim.GuestShutdown(ns, "nothing"); !apierrors.IsNotFound(err) {
		t.Errorf("GuestShutdown of a missing VMI = %v, want NotFound", err)
	}
}

func TestManualHonoursStartAndStopRequests(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	create(t, newVM(ns, "vm", kubevirtv1.RunStrategyManual))
	waitVM(t, ns, "vm", vmPrintable(kubevirtv1.VirtualMachineStatusStopped))
	requestStart(t, ns, "vm")
	vmi := waitVMI(t, ns, "vm", vmiReadyWithIP)
	waitVM(t, ns, "vm", func(vm *kubevirtv1.VirtualMachine) (bool, string) {
		if len(vm.Status.StateChangeRequests) != 0 {
			return false, fmt.Sprintf("served requests not trimmed: %v", vm.Status.StateChangeRequests)
		}
		return vmRunningReady(vm)
	})
	requestStatus(t, ns, "vm", kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StopRequest, UID: &vmi.UID})
	waitGone(t, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}})
	waitVM(t, ns, "vm", vmPrintable(kubevirtv1.VirtualMachineStatusStopped))
}

func TestDeletingTheVMIOfAnAlwaysVMStartsAnother(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	first := startRunning(t, ns, "vm", kubevirtv1.RunStrategyAlways)
	if err := testenv.Client().Delete(ctxT(t), first); err != nil {
		t.Fatal(err)
	}
	waitVMI(t, ns, "vm", func(vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
		if vmi.UID == first.UID {
			return false, fmt.Sprintf("first VMI still there, phase %s, deleting %v", vmi.Status.Phase, vmi.DeletionTimestamp != nil)
		}
		return vmiReadyWithIP(vmi)
	})
}

func TestNodeSelector(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	pinned := newVM(ns, "pinned", kubevirtv1.RunStrategyAlways)
	pinned.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "kv-node-2"}
	create(t, pinned)
	vmi := waitVMI(t, ns, "pinned", vmiReadyWithIP)
	if vmi.Status.NodeName != "kv-node-2" {
		t.Errorf("pinned VMI runs on %q, want kv-node-2", vmi.Status.NodeName)
	}

	nowhere := newVM(ns, "nowhere", kubevirtv1.RunStrategyAlways)
	nowhere.Spec.Template.Spec.NodeSelector = map[string]string{"gpu": "h100"}
	create(t, nowhere)
	waitVM(t, ns, "nowhere", vmPrintable(kubevirtv1.VirtualMachineStatusUnschedulable))
	if vmi := getVMI(t, ns, "nowhere"); vmi.Status.Phase != kubevirtv1.Scheduling || vmi.Status.NodeName != "" {
		t.Errorf("unschedulable VMI phase %q node %q, want Scheduling and no node", vmi.Status.Phase, vmi.Status.NodeName)
	}
}

func TestStandaloneVMI(t *testing.T) {
	t.Parallel()
	ns := testenv.Namespace(t)
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "solo"},
		Spec:       *newVM(ns, "solo", kubevirtv1.RunStrategyAlways).Spec.Template.Spec.DeepCopy(),
	}
	create(t, vmi)
	waitVMI(t, ns, "solo", vmiReadyWithIP)
	if err := sim.GuestShutdown(ns, "solo"); err != nil {
		t.Fatal(err)
	}
	// Nothing restarts a VMI without a VM; it stays, finished.
	waitVMI(t, ns, "solo", func(vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
		return vmi.Status.Phase == kubevirtv1.Succeeded && len(vmi.Finalizers) == 0,
			fmt.Sprintf("phase %s finalizers %v", vmi.Status.Phase, vmi.Finalizers)
	})
	if err := testenv.Client().Delete(ctxT(t), vmi); err != nil {
		t.Fatal(err)
	}
	waitGone(t, vmi)
}

func TestVMDeletion(t *testing.T) {
	t.Parallel()
	for _, policy := range []metav1.DeletionPropagation{"", metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
		t.Run("propagation "+string(policy)+" deletes the VMI", func(t *testing.T) {
			t.Parallel()
			ns := testenv.Namespace(t)
			startRunning(t, ns, "vm", kubevirtv1.RunStrategyAlways)
			// Another controller's finalizer keeps the VM Terminating after
			// its VMI is gone, long enough to see; the simulator leaves it.
			const hold = "test.hyperfleet.io/hold"
			updateVM(t, ns, "vm", func(vm *kubevirtv1.VirtualMachine) { vm.Finalizers = append(vm.Finalizers, hold) })
			var opts []client.DeleteOption
			if policy != "" {
				opts = append(opts, client.PropagationPolicy(policy))
			}
			vm := getVM(t, ns, "vm")
			if err := testenv.Client().Delete(ctxT(t), vm, opts...); err != nil {
				t.Fatal(err)
			}
			waitGone(t, &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vm"}})
			waitVM(t, ns, "vm", func(vm *kubevirtv1.VirtualMachine) (bool, string) {
				if !slices.Equal(vm.Finalizers, []string{hold}) {
					return false, fmt.Sprintf("finalizers %v, want only %s", vm.Finalizers, hold)
				}
				return vmPrintable(kubevirtv1.VirtualMachineStatusTerminating)(vm)
			})
			updateVM(t, ns, "vm", func(vm *kubevirtv1.VirtualMachine) { vm.Finalizers = nil })
			waitGone(t, vm)
		})
	}
	t.Run("propagation Orphan keeps the VMI running", func(t *testing.T) {
		t.Parallel()
		ns := testenv.Namespace(t)
		vmi := startRunning(t, ns, "vm", kubevirtv1.RunStrategyAlways)
		vm := getVM(t, ns, "vm")
		if err := testenv.Client().Delete(ctxT(t), vm, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
			t.Fatal(err)
		}
		waitGone(t, vm)
		kept := getVMI(t, ns, "vm")
		if kept == nil || kept.UID != vmi.UID || len(kept.OwnerReferences) != 0 || kept.Status.Phase != kubevirtv1.Running {
			t.Fatalf("orphaned VMI = %+v, want the same VMI running without owners", kept)
		}
		// Once orphaned it is an ordinary VMI: deleting it shuts it down.
		if err := testenv.Client().Delete(ctxT(t), kept); err != nil {
			t.Fatal(err)
		}
		waitGone(t, kept)
	})
	t.Run("a VMI whose VM never existed is collected", func(t *testing.T) {
		t.Parallel()
		ns := testenv.Namespace(t)
		vmi := &kubevirtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stray", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "stray", UID: types.UID("00000000-0000-0000-0000-000000000001"),
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}}},
			Spec: *newVM(ns, "stray", kubevirtv1.RunStrategyAlways).Spec.Template.Spec.DeepCopy(),
		}
		create(t, vmi)
		waitGone(t, vmi)
	})
}

func requestStart(t testing.TB, ns, name string) {
	t.Helper()
	requestStatus(t, ns, name, kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StartRequest})
}

// requestStatus appends a state change request to the VM's status, as
// virt-api does for `virtctl start` and `virtctl stop`.
func requestStatus(t testing.TB, ns, name string, req kubevirtv1.VirtualMachineStateChangeRequest) {
	t.Helper()
	for i := 0; ; i++ {
		vm := getVM(t, ns, name)
		base := vm.DeepCopy()
		vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests, req)
		err := testenv.Client().Status().Patch(ctxT(t), vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || i == 20 {
			t.Fatalf("adding %s request to VM %s/%s: %v", req.Action, ns, name, err)
		}
	}
}

func phaseIs(p kubevirtv1.VirtualMachineInstancePhase) func(*kubevirtv1.VirtualMachineInstance) (bool, string) {
	return func(vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
		return vmi.Status.Phase == p, fmt.Sprintf("VMI phase %q, want %q", vmi.Status.Phase, p)
	}
}
