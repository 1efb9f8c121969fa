package kubevirtsim

import (
	"context"
	"crypto/sha1" //nolint:gosec // a name-based (v5) UUID is defined with SHA-1; nothing secret is hashed
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// createRetry waits for the cache to show a VMI this controller just
// created.
const createRetry = 200 * time.Millisecond

// vmReconciler plays virt-controller's VirtualMachine controller.
type vmReconciler struct{ s *Simulator }

// vmSync is what acting on the run strategy did, for the status.
type vmSync struct {
	vmi           *kubevirtv1.VirtualMachineInstance // the VMI after acting: a new one when started
	startExpected bool                               // a VMI was just created
	stopExpected  bool                               // the VMI was just deleted
	requeueAfter  time.Duration
	syncErr       *syncError
	// waitForCache means the VMI we create exists already but the cache
	// does not show it yet: try again without writing a misleading status.
	waitForCache bool
}

func (r *vmReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := r.s
	vm := &kubevirtv1.VirtualMachine{}
	if err := s.client.Get(ctx, req.NamespacedName, vm); err != nil {
		if apierrors.IsNotFound(err) {
			s.forgetVM(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	vmi, err := r.claimVMI(ctx, vm)
	if err != nil {
		return result(err)
	}
	now := time.Now()
	if vm.DeletionTimestamp != nil {
		return r.reconcileDelete(ctx, vm, vmi, now)
	}
	if err := updateFinalizers(ctx, s.client, vm, func(o client.Object) {
		controllerutil.AddFinalizer(o, kubevirtv1.VirtualMachineControllerFinalizer)
	}); err != nil {
		return result(err)
	}
	sync, err := r.syncRunStrategy(ctx, vm, vmi, now)
	if err != nil {
		return result(err)
	}
	if sync.waitForCache {
		return ctrl.Result{RequeueAfter: createRetry}, nil
	}
	if err := r.updateStatus(ctx, vm, sync, now); err != nil {
		return result(err)
	}
	if err := r.releaseFinalVMI(ctx, sync.vmi); err != nil {
		return result(err)
	}
	return ctrl.Result{RequeueAfter: sync.requeueAfter}, nil
}

// syncRunStrategy starts or stops the VMI as the run strategy says, like
// KubeVirt's syncRunStrategy. API errors come back as err, for a retry;
// what the user must fix comes back as sync.syncErr, for the Failure
// condition.
func (r *vmReconciler) syncRunStrategy(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (vmSync, error) {
	sync := vmSync{vmi: vmi}
	rs, err := vm.RunStrategy()
	if err != nil {
		sync.syncErr = &syncError{reason: failedCreateReason, msg: fmt.Sprintf("Error fetching RunStrategy: %v", err)}
		return sync, nil
	}
	switch rs {
	case kubevirtv1.RunStrategyAlways:
		if vmi != nil {
			if hasStopRequestFor(vm, vmi) || vmi.IsFinal() {
				err := r.stopVMI(ctx, vmi, &sync, "restart")
				if sync.stopExpected && vmi.IsFinal() {
					r.s.counters.restarts.Add(1)
				}
				return sync, err
			}
			return sync, nil
		}
		return sync, r.startVMI(ctx, vm, now, &sync)

	case kubevirtv1.RunStrategyRerunOnFailure:
		if vmi != nil {
			failed, succeeded := vmi.Status.Phase == kubevirtv1.Failed, vmi.Status.Phase == kubevirtv1.Succeeded
			if vmi.DeletionTimestamp == nil && (hasStopRequestFor(vm, vmi) || failed || succeeded) {
				if failed {
					// Recorded before the delete, so a lost status write
					// cannot leave a failed VM stopped for good.
					if err := r.addStartRequest(ctx, vm); err != nil {
						return sync, err
					}
				}
				err := r.stopVMI(ctx, vmi, &sync, "finished")
				if sync.stopExpected && failed {
					r.s.counters.restarts.Add(1)
				}
				return sync, err
			}
			return sync, nil
		}
		// A VM that already ran under RerunOnFailure and stopped for good
		// stays stopped until asked to start.
		if !hasStartRequest(vm) && vm.Status.RunStrategy == rs {
			return sync, nil
		}
		return sync, r.startVMI(ctx, vm, now, &sync)

	case kubevirtv1.RunStrategyManual:
		if vmi != nil {
			if hasStopRequestFor(vm, vmi) {
				return sync, r.stopVMI(ctx, vmi, &sync, "stop request")
			}
			return sync, nil
		}
		if hasStartRequest(vm) {
			return sync, r.startVMI(ctx, vm, now, &sync)
		}
		return sync, nil

	case kubevirtv1.RunStrategyHalted:
		if vmi == nil {
			if hasStartRequest(vm) {
				// virt-api's "start paused" leaves a Halted VM with a start
				// request; KubeVirt turns it into a running VM.
				return sync, r.setRunning(ctx, vm)
			}
			return sync, nil
		}
		return sync, r.stopVMI(ctx, vmi, &sync, "halted")

	case kubevirtv1.RunStrategyOnce:
		if vmi == nil {
			return sync, r.startVMI(ctx, vm, now, &sync)
		}
		return sync, nil
	}
	sync.syncErr = &syncError{reason: failedCreateReason, msg: fmt.Sprintf("unsupported runStrategy: %s", rs)}
	return sync, nil
}

// startVMI creates the VM's VMI unless the crash-loop backoff still runs.
func (r *vmReconciler) startVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine, now time.Time, sync *vmSync) error {
	if left := r.s.startBackoffLeft(vm, now); left > 0 {
		sync.requeueAfter = left
		return nil
	}
	if vm.Spec.Template == nil {
		sync.syncErr = &syncError{reason: failedCreateReason, msg: "Failure while starting VMI: the VirtualMachine has no spec.template"}
		return nil
	}
	if vmConditionTrue(vm, kubevirtv1.VirtualMachineManualRecoveryRequired) {
		return nil
	}
	vmi := newVMIFromVM(vm)
	err := r.s.client.Create(ctx, vmi)
	switch {
	case err == nil:
		r.s.counters.created.Add(1)
		ctrl.LoggerFrom(ctx).Info("Starting VM by creating its VMI", "uid", vmi.UID)
		sync.vmi = vmi
		sync.startExpected = true
		return nil
	case apierrors.IsAlreadyExists(err):
		existing := &kubevirtv1.VirtualMachineInstance{}
		if getErr := r.s.reader.Get(ctx, client.ObjectKeyFromObject(vmi), existing); getErr == nil {
			if ref := metav1.GetControllerOf(existing); ref != nil && ref.UID == vm.UID {
				sync.waitForCache = true
				return nil
			}
		}
		// Another owner's VMI holds the name; its deletion brings us back.
		sync.syncErr = &syncError{reason: failedCreateReason, msg: fmt.Sprintf("Failure while starting VMI: %v", err)}
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err):
		sync.syncErr = &syncError{reason: failedCreateReason, msg: fmt.Sprintf("Failure while starting VMI: %v", err)}
		return nil
	}
	return err
}

// stopVMI deletes the VMI, saying why; the VMI controller then shuts its
// guest down.
func (r *vmReconciler) stopVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, sync *vmSync, why string) error {
	if vmi == nil || vmi.DeletionTimestamp != nil {
		return nil
	}
	err := r.s.client.Delete(ctx, vmi, client.Preconditions{UID: &vmi.UID})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Stopping VM by deleting its VMI", "reason", why, "phase", vmi.Status.Phase)
	r.s.counters.deleted.Add(1)
	sync.stopExpected = true
	return nil
}

// addStartRequest queues a start, as KubeVirt does when a RerunOnFailure
// VMI fails, so the next VMI starts once this one is gone.
func (r *vmReconciler) addStartRequest(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	// One queued start is enough; a second, added by a reconcile that saw a
	// stale VMI, would start the VM again after its next clean shutdown.
	if slices.ContainsFunc(vm.Status.StateChangeRequests, func(r kubevirtv1.VirtualMachineStateChangeRequest) bool {
		return r.Action == kubevirtv1.StartRequest
	}) {
		return nil
	}
	base := vm.DeepCopy()
	vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests, kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StartRequest})
	return r.s.client.Status().Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// setRunning switches a Halted VM with a start request to running, the way
// KubeVirt does: runStrategy Always, or running=true for a VM using the
// deprecated field.
func (r *vmReconciler) setRunning(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	base := vm.DeepCopy()
	if vm.Spec.Running != nil {
		vm.Spec.Running = ptr.To(true)
	} else {
		always := kubevirtv1.RunStrategyAlways
		vm.Spec.RunStrategy = &always
	}
	return r.s.client.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// reconcileDelete plays a VM's deletion: KubeVirt's VM controller stops the
// VMI and holds the VM with its finalizer until the VMI is gone; the
// garbage collector's part — foreground (delete the VMI first) or orphan
// (release it) propagation, and the finalizers they put on the VM — is
// played here too.
func (r *vmReconciler) reconcileDelete(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, now time.Time) (ctrl.Result, error) {
	orphan := controllerutil.ContainsFinalizer(vm, metav1.FinalizerOrphanDependents)
	sync := vmSync{vmi: vmi}
	if vmi != nil && !orphan {
		if err := r.stopVMI(ctx, vmi, &sync, "VM deleted"); err != nil {
			return result(err)
		}
	}
	if err := r.updateStatus(ctx, vm, sync, now); err != nil {
		return result(err)
	}
	if err := r.releaseFinalVMI(ctx, vmi); err != nil {
		return result(err)
	}
	if orphan {
		if err := r.orphanVMI(ctx, vm); err != nil {
			return result(err)
		}
	} else {
		// The cache can lag; the VM must not go while its VMI lives.
		live := &kubevirtv1.VirtualMachineInstance{}
		err := r.s.reader.Get(ctx, client.ObjectKeyFromObject(vm), live)
		switch {
		case err == nil && metav1.IsControlledBy(live, vm):
			// The VMI's deletion event brings us back; the requeue is a
			// safety net for an event that raced this read (KubeVirt's
			// controllers resync periodically too).
			return ctrl.Result{RequeueAfter: time.Second}, nil
		case err != nil && !apierrors.IsNotFound(err):
			return ctrl.Result{}, err
		}
	}
	return result(updateFinalizers(ctx, r.s.client, vm, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, kubevirtv1.VirtualMachineControllerFinalizer)
		controllerutil.RemoveFinalizer(o, metav1.FinalizerDeleteDependents)
		controllerutil.RemoveFinalizer(o, metav1.FinalizerOrphanDependents)
	}))
}

// orphanVMI removes the VM from its VMI's owners, as the garbage collector
// does for orphan propagation.
func (r *vmReconciler) orphanVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := r.s.reader.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		return client.IgnoreNotFound(err)
	}
	base := vmi.DeepCopy()
	kept := vmi.OwnerReferences[:0]
	for _, ref := range vmi.OwnerReferences {
		if ref.UID != vm.UID {
			kept = append(kept, ref)
		}
	}
	if len(kept) == len(base.OwnerReferences) {
		return nil
	}
	vmi.OwnerReferences = kept
	ctrl.LoggerFrom(ctx).Info("Orphaning VMI of deleted VM")
	return r.s.client.Patch(ctx, vmi, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// claimVMI returns the VMI this VM controls: the one of the same name if
// its controller reference points here, adopting one with no controller
// as KubeVirt does; nil if there is none or another owner controls it.
func (r *vmReconciler) claimVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := r.s.client.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if ref := metav1.GetControllerOf(vmi); ref != nil {
		if ref.UID == vm.UID {
			return vmi, nil
		}
		return nil, nil
	}
	if vm.DeletionTimestamp != nil || vmi.DeletionTimestamp != nil {
		return nil, nil
	}
	ctrl.LoggerFrom(ctx).Info("Adopting orphan VMI of the same name")
	base := vmi.DeepCopy()
	vmi.OwnerReferences = append(vmi.OwnerReferences, *metav1.NewControllerRef(vm, kubevirtv1.VirtualMachineGroupVersionKind))
	if err := r.s.client.Patch(ctx, vmi, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, err
	}
	return vmi, nil
}

// updateStatus computes the VM's status from its VMI and writes it when it
// changed.
func (r *vmReconciler) updateStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine, sync vmSync, now time.Time) error {
	base := vm.DeepCopy()
	setBasicStatus(vm, sync.vmi)
	r.s.syncStartFailure(vm, sync.vmi, now)
	syncConditions(vm, sync.vmi, sync.syncErr, now)
	vm.Status.PrintableStatus = printableStatus(vm, sync.vmi, sync.startExpected, sync.stopExpected)
	if equalStatus(base.Status, vm.Status) {
		return nil
	}
	err := r.s.client.Status().Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if err == nil && base.Status.PrintableStatus != vm.Status.PrintableStatus {
		ctrl.LoggerFrom(ctx).V(1).Info("Recorded VM status", "printableStatus", vm.Status.PrintableStatus)
	}
	return err
}

// releaseFinalVMI removes the VM controller's finalizer from a VMI that has
// ended, now that the VM's status has recorded how.
func (r *vmReconciler) releaseFinalVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) error {
	if vmi == nil || !vmi.IsFinal() {
		return nil
	}
	return client.IgnoreNotFound(updateFinalizers(ctx, r.s.client, vmi, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, kubevirtv1.VirtualMachineControllerFinalizer)
	}))
}

// firmwareNamespace is the UUID namespace KubeVirt derives a VMI's stable
// firmware UUID from its name with (CalculateLegacyUUID).
var firmwareNamespace = [16]byte{0x6a, 0x1a, 0x24, 0xa1, 0x40, 0x61, 0x46, 0x07, 0x8b, 0xf4, 0xa3, 0x96, 0x3d, 0x0c, 0x58, 0x95}

// firmwareUUID is the UUID KubeVirt gives the guest of the VM with this
// name, the same after every restart.
func firmwareUUID(name string) types.UID { return types.UID(uuidV5(firmwareNamespace, name)) }

// uuidV5 is the name-based, SHA-1 UUID of RFC 9562, as google/uuid's
// NewSHA1 computes it.
func uuidV5(namespace [16]byte, name string) string {
	h := sha1.New() //nolint:gosec // see the import
	h.Write(namespace[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	x := hex.EncodeToString(u[:])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}
