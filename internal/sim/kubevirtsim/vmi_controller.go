package kubevirtsim

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

const (
	// conflictRequeue retries a write lost to a concurrent one; the newer
	// object's watch event usually arrives first anyway.
	conflictRequeue = 50 * time.Millisecond
	// launcherImage is what the VMI reports as its virt-launcher image.
	launcherImage = "quay.io/kubevirt/virt-launcher:v1.9.0"
)

// The guest every simulated VM boots, as its guest agent reports it.
var guestOS = kubevirtv1.VirtualMachineInstanceGuestOSInfo{
	Name:          "Ubuntu",
	ID:            "ubuntu",
	PrettyName:    "Ubuntu 24.04.2 LTS",
	Version:       "24.04.2 LTS (Noble Numbat)",
	VersionID:     "24.04",
	KernelRelease: "6.8.0-60-generic",
	KernelVersion: "#63-Ubuntu SMP PREEMPT_DYNAMIC",
	Machine:       "x86_64",
}

// vmiReconciler plays virt-controller's VMI controller, the scheduler,
// virt-handler and, for VMIs, the garbage collector.
type vmiReconciler struct{ s *Simulator }

func (r *vmiReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := r.s
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.client.Get(ctx, req.NamespacedName, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			s.forgetVMI(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	now := time.Now()
	since, deletingSince := s.observe(vmi, now)

	if vmi.DeletionTimestamp != nil {
		return r.finalize(ctx, vmi, now, deletingSince)
	}
	orphan, err := r.collectable(ctx, vmi)
	if err != nil {
		return ctrl.Result{}, err
	}
	if orphan != nil {
		return r.collect(ctx, orphan)
	}
	if vmi.IsFinal() {
		return result(r.removeFinalizers(ctx, vmi))
	}
	if err := r.ensureMetadata(ctx, vmi); err != nil {
		return result(err)
	}
	return r.advance(ctx, vmi, now, since)
}

// advance moves a live VMI one step along Pending → Scheduling → Scheduled
// → Running → booted, once the step's latency has passed since its phase
// began.
func (r *vmiReconciler) advance(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, now, since time.Time) (ctrl.Result, error) {
	lat := r.s.lat
	waitFor := func(d time.Duration) time.Duration { return since.Add(d).Sub(now) }
	switch vmi.Status.Phase {
	case kubevirtv1.VmPhaseUnset:
		err := r.transition(ctx, vmi, kubevirtv1.Pending, now, func(st *kubevirtv1.VirtualMachineInstanceStatus) {
			setVMICondition(st, kubevirtv1.VirtualMachineInstanceCondition{
				Type:    kubevirtv1.VirtualMachineInstanceReady,
				Status:  corev1.ConditionFalse,
				Reason:  kubevirtv1.GuestNotRunningReason,
				Message: "Guest VM is not reported as running",
			}, now)
		})
		return resultAfter(err, lat.Pending)
	case kubevirtv1.Pending:
		if w := waitFor(lat.Pending); w > 0 {
			return ctrl.Result{RequeueAfter: w}, nil
		}
		err := r.transition(ctx, vmi, kubevirtv1.Scheduling, now, func(st *kubevirtv1.VirtualMachineInstanceStatus) {
			st.QOSClass = ptr.To(corev1.PodQOSBurstable)
		})
		return resultAfter(err, lat.Scheduling)
	case kubevirtv1.Scheduling:
		if w := waitFor(lat.Scheduling); w > 0 {
			return ctrl.Result{RequeueAfter: w}, nil
		}
		return r.schedule(ctx, vmi, now)
	case kubevirtv1.Scheduled:
		if w := waitFor(lat.Scheduled); w > 0 {
			return ctrl.Result{RequeueAfter: w}, nil
		}
		return r.startDomain(ctx, vmi, now)
	case kubevirtv1.Running:
		if vmiConditionTrue(vmi, kubevirtv1.VirtualMachineInstanceReady) {
			return ctrl.Result{}, nil
		}
		if w := waitFor(lat.Boot); w > 0 {
			return ctrl.Result{RequeueAfter: w}, nil
		}
		return r.boot(ctx, vmi, now)
	}
	// Unknown and WaitingForSync belong to node failures and migrations,
	// which are not simulated.
	return ctrl.Result{}, nil
}

// schedule places the VMI on a node, or marks it unschedulable when the
// test holds it or no node matches its nodeSelector; either way it then
// waits for an event (a release, a spec change).
func (r *vmiReconciler) schedule(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (ctrl.Result, error) {
	s := r.s
	key := client.ObjectKeyFromObject(vmi)
	var node, why string
	if s.held(key) {
		why = fmt.Sprintf("0/%d nodes are available: scheduling is held by the test (kubevirtsim HangScheduling).", len(s.opts.Nodes))
	} else if node = s.reserveNode(vmi); node == "" {
		why = fmt.Sprintf("0/%d nodes are available: %d node(s) didn't match Pod's node affinity/selector (nodeSelector %s).",
			len(s.opts.Nodes), len(s.opts.Nodes), selectorString(vmi.Spec.NodeSelector))
	}
	if node == "" {
		err := r.patchStatus(ctx, vmi, func(st *kubevirtv1.VirtualMachineInstanceStatus) {
			setVMICondition(st, kubevirtv1.VirtualMachineInstanceCondition{
				Type:    kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
				Status:  corev1.ConditionFalse,
				Reason:  corev1.PodReasonUnschedulable,
				Message: why,
			}, now)
		})
		return result(err)
	}
	err := r.transition(ctx, vmi, kubevirtv1.Scheduled, now, func(st *kubevirtv1.VirtualMachineInstanceStatus) {
		st.NodeName = node
		st.LauncherContainerImageVersion = launcherImage
		setVMICondition(st, kubevirtv1.VirtualMachineInstanceCondition{
			Type:   kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
			Status: corev1.ConditionTrue,
		}, now)
	})
	if err == nil {
		s.counters.scheduled.Add(1)
		ctrl.LoggerFrom(ctx).V(1).Info("Scheduled VMI", "node", node)
	}
	return resultAfter(err, s.lat.Scheduled)
}

// startDomain plays virt-handler starting the domain: Running, with the
// guest's interfaces known but no address until it boots.
func (r *vmiReconciler) startDomain(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (ctrl.Result, error) {
	names := interfaceNames(&vmi.Spec)
	ips, err := r.s.allocateIPs(vmi, len(names))
	if err != nil {
		return ctrl.Result{}, err
	}
	err = r.transition(ctx, vmi, kubevirtv1.Running, now, func(st *kubevirtv1.VirtualMachineInstanceStatus) {
		st.Interfaces = make([]kubevirtv1.VirtualMachineInstanceNetworkInterface, len(names))
		for i, name := range names {
			st.Interfaces[i] = kubevirtv1.VirtualMachineInstanceNetworkInterface{
				Name:          name,
				MAC:           macAddress(&vmi.Spec, name, ips[i]),
				InterfaceName: fmt.Sprintf("eth%d", i),
				InfoSource:    "domain",
				QueueCount:    1,
				LinkState:     "up",
			}
		}
		setVMICondition(st, kubevirtv1.VirtualMachineInstanceCondition{
			Type:    kubevirtv1.VirtualMachineInstanceReady,
			Status:  corev1.ConditionFalse,
			Reason:  kubevirtv1.GuestNotRunningReason,
			Message: "Guest VM is booting",
		}, now)
	})
	return resultAfter(err, r.s.lat.Boot)
}

// boot plays the guest finishing its boot: the guest agent connects and
// reports the OS and the addresses, and the VMI turns Ready.
func (r *vmiReconciler) boot(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (ctrl.Result, error) {
	ips, err := r.s.allocateIPs(vmi, len(vmi.Status.Interfaces))
	if err != nil {
		return ctrl.Result{}, err
	}
	err = r.patchStatus(ctx, vmi, func(st *kubevirtv1.VirtualMachineInstanceStatus) {
		for i := range st.Interfaces {
			st.Interfaces[i].IP = ips[i]
			st.Interfaces[i].IPs = []string{ips[i]}
			st.Interfaces[i].InfoSource = "domain, guest-agent"
		}
		st.GuestOSInfo = guestOS
		setVMICondition(st, kubevirtv1.VirtualMachineInstanceCondition{
			Type:   kubevirtv1.VirtualMachineInstanceReady,
			Status: corev1.ConditionTrue,
		}, now)
		setVMICondition(st, kubevirtv1.VirtualMachineInstanceCondition{
			Type:   kubevirtv1.VirtualMachineInstanceAgentConnected,
			Status: corev1.ConditionTrue,
		}, now)
	})
	if err == nil {
		r.s.counters.booted.Add(1)
		ctrl.LoggerFrom(ctx).V(1).Info("Booted guest", "ip", strings.Join(ips, ","))
	}
	return result(err)
}

// finalize plays a VMI's deletion: a running guest shuts down gracefully
// (Succeeded), one that never ran just fails, then the finalizers go.
func (r *vmiReconciler) finalize(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, now, deletingSince time.Time) (ctrl.Result, error) {
	if vmi.IsFinal() {
		return result(r.removeFinalizers(ctx, vmi))
	}
	phase := kubevirtv1.Failed
	if vmi.Status.Phase == kubevirtv1.Running {
		if w := deletingSince.Add(r.s.lat.Shutdown).Sub(now); w > 0 {
			return ctrl.Result{RequeueAfter: w}, nil
		}
		phase = kubevirtv1.Succeeded
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Stopping deleted VMI", "phase", vmi.Status.Phase, "finalPhase", phase)
	err := r.transition(ctx, vmi, phase, now, func(st *kubevirtv1.VirtualMachineInstanceStatus) {
		guestGone(st, kubevirtv1.PodTerminatingReason, "virt-launcher pod is terminating", now)
	})
	return result(err)
}

// ensureMetadata keeps what virt-controller keeps on a live VMI's metadata:
// its finalizer, and the kubevirt.io/nodeName label once it has a node.
func (r *vmiReconciler) ensureMetadata(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	if err := updateFinalizers(ctx, r.s.client, vmi, func(o client.Object) {
		controllerutil.AddFinalizer(o, kubevirtv1.VirtualMachineInstanceFinalizer)
	}); err != nil {
		return err
	}
	node := vmi.Status.NodeName
	if node == "" || vmi.Labels[kubevirtv1.NodeNameLabel] == node {
		return nil
	}
	// A merge patch of one label needs no lock: it touches nothing else.
	base := vmi.DeepCopy()
	if vmi.Labels == nil {
		vmi.Labels = map[string]string{}
	}
	vmi.Labels[kubevirtv1.NodeNameLabel] = node
	return r.s.client.Patch(ctx, vmi, client.MergeFrom(base))
}

// removeFinalizers lets a final VMI go: its own finalizers always, the VM
// controller's too when no live VM owns it (otherwise the VM controller
// removes it once it has recorded the VMI's end).
func (r *vmiReconciler) removeFinalizers(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	orphan := controllerutil.ContainsFinalizer(vmi, kubevirtv1.VirtualMachineControllerFinalizer) && !r.hasLiveController(ctx, vmi)
	return updateFinalizers(ctx, r.s.client, vmi, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, kubevirtv1.VirtualMachineInstanceFinalizer)
		controllerutil.RemoveFinalizer(o, kubevirtv1.DeprecatedVirtualMachineInstanceFinalizer)
		if orphan {
			controllerutil.RemoveFinalizer(o, kubevirtv1.VirtualMachineControllerFinalizer)
		}
	})
}

// hasLiveController reports whether the VM named by the VMI's controller
// reference exists (in the cache) with that UID.
func (r *vmiReconciler) hasLiveController(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) bool {
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || !isVMRef(*ref) {
		return false
	}
	vm := &kubevirtv1.VirtualMachine{}
	err := r.s.client.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: ref.Name}, vm)
	return err == nil && vm.UID == ref.UID
}

// collectable plays the garbage collector's test: the VMI has owners, all
// of them VirtualMachines, and none exists any more. Owners of other kinds
// are left to a real garbage collector. Like the garbage collector, it
// confirms on the API server before condemning, since the cache may show an
// owner reference already removed (orphan deletion) or miss a VM just
// created; it returns the VMI as the API server has it, or nil.
func (r *vmiReconciler) collectable(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (*kubevirtv1.VirtualMachineInstance, error) {
	if !r.ownersGone(ctx, vmi, r.s.client) {
		return nil, nil
	}
	live := &kubevirtv1.VirtualMachineInstance{}
	if err := r.s.reader.Get(ctx, client.ObjectKeyFromObject(vmi), live); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if live.DeletionTimestamp != nil || !r.ownersGone(ctx, live, r.s.reader) {
		return nil, nil
	}
	return live, nil
}

// ownersGone reports whether the VMI has owners, all VirtualMachines, and
// reader finds none of them (by name and UID). A read error counts as
// present: the next event retries.
func (r *vmiReconciler) ownersGone(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, reader client.Reader) bool {
	if len(vmi.OwnerReferences) == 0 {
		return false
	}
	for _, ref := range vmi.OwnerReferences {
		if !isVMRef(ref) {
			return false
		}
	}
	for _, ref := range vmi.OwnerReferences {
		vm := &kubevirtv1.VirtualMachine{}
		err := reader.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: ref.Name}, vm)
		if (err == nil && vm.UID == ref.UID) || (err != nil && !apierrors.IsNotFound(err)) {
			return false
		}
	}
	return true
}

// collect deletes a VMI whose VMs are all gone, as the garbage collector
// does for a VM deleted in the background. The preconditions make the
// delete fail if the VMI changed since it was judged.
func (r *vmiReconciler) collect(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (ctrl.Result, error) {
	ctrl.LoggerFrom(ctx).Info("Deleting VMI whose VirtualMachine is gone")
	err := r.s.client.Delete(ctx, vmi,
		client.Preconditions{UID: &vmi.UID, ResourceVersion: &vmi.ResourceVersion},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err == nil {
		r.s.counters.deleted.Add(1)
		r.s.counters.collected.Add(1)
	}
	return result(err)
}

// transition moves the VMI to phase with mutate's other status changes and
// starts the new phase's clock.
func (r *vmiReconciler) transition(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, phase kubevirtv1.VirtualMachineInstancePhase, now time.Time, mutate func(*kubevirtv1.VirtualMachineInstanceStatus)) error {
	err := r.patchStatus(ctx, vmi, func(st *kubevirtv1.VirtualMachineInstanceStatus) {
		setPhase(st, phase, now)
		mutate(st)
	})
	if err == nil {
		r.s.entered(vmi, phase, now)
	}
	return err
}

// patchStatus writes the status changes mutate makes, if any, through the
// status subresource; a concurrent write makes it fail with a conflict.
func (r *vmiReconciler) patchStatus(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, mutate func(*kubevirtv1.VirtualMachineInstanceStatus)) error {
	base := vmi.DeepCopy()
	mutate(&vmi.Status)
	if equalStatus(base.Status, vmi.Status) {
		return nil
	}
	return r.s.client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// interfaceNames lists the VMI's interfaces in order, or KubeVirt's default
// pod interface when the spec declares none.
func interfaceNames(spec *kubevirtv1.VirtualMachineInstanceSpec) []string {
	var names []string
	for _, iface := range spec.Domain.Devices.Interfaces {
		names = append(names, iface.Name)
	}
	if len(names) == 0 {
		for _, n := range spec.Networks {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		names = []string{kubevirtv1.DefaultPodNetwork().Name}
	}
	return names
}

// macAddress is the interface's macAddress from the spec, or one derived
// from its address.
func macAddress(spec *kubevirtv1.VirtualMachineInstanceSpec, name, ip string) string {
	for _, iface := range spec.Domain.Devices.Interfaces {
		if iface.Name == name && iface.MacAddress != "" {
			return iface.MacAddress
		}
	}
	return macFor(ip)
}

func selectorString(sel map[string]string) string {
	parts := make([]string, 0, len(sel))
	for _, k := range sortedKeys(sel) {
		parts = append(parts, k+"="+sel[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// isVMRef reports whether an owner reference names a KubeVirt VirtualMachine.
func isVMRef(ref metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == kubevirtv1.GroupVersion.Group && ref.Kind == kubevirtv1.VirtualMachineGroupVersionKind.Kind
}

// result turns a write's error into a reconcile result: a conflict is
// retried shortly and quietly, a vanished object needs nothing more.
func result(err error) (ctrl.Result, error) {
	return resultAfter(err, 0)
}

// resultAfter is result that, on success, requeues after d (when positive)
// for the next timed step.
func resultAfter(err error, d time.Duration) (ctrl.Result, error) {
	switch {
	case err == nil:
		if d > 0 {
			return ctrl.Result{RequeueAfter: d}, nil
		}
		return ctrl.Result{}, nil
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: conflictRequeue}, nil
	case apierrors.IsNotFound(err):
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

// equalStatus compares statuses the way the API server's round trip leaves
// them, so an unchanged status is not written.
func equalStatus[T any](a, b T) bool { return equality.Semantic.DeepEqual(a, b) }
