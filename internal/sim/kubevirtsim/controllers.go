package kubevirtsim

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

const (
	// ownerVMIndex indexes VMIs by the UIDs of the VirtualMachines owning
	// them, to find a deleted VM's VMIs whatever their names.
	ownerVMIndex = "kubevirtsim.ownerVMUID"
	// workers per controller: reconciles mostly wait on the API server, so
	// a few in parallel keep a hundred VMs moving on two cores.
	workers = 8
)

func (s *Simulator) setupControllers(ctx context.Context, mgr manager.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(ctx, &kubevirtv1.VirtualMachineInstance{}, ownerVMIndex, func(o client.Object) []string {
		var uids []string
		for _, ref := range o.GetOwnerReferences() {
			if isVMRef(ref) {
				uids = append(uids, string(ref.UID))
			}
		}
		return uids
	})
	if err != nil {
		return fmt.Errorf("kubevirtsim: indexing VMIs by owner: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("kubevirtsim-vm").
		For(&kubevirtv1.VirtualMachine{}).
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(vmsOfVMI)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&vmReconciler{s: s})
	if err != nil {
		return fmt.Errorf("kubevirtsim: setting up the VirtualMachine controller: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("kubevirtsim-vmi").
		For(&kubevirtv1.VirtualMachineInstance{}).
		// Only a VM's disappearance concerns its VMIs directly: the
		// garbage collector's part.
		Watches(&kubevirtv1.VirtualMachine{}, handler.EnqueueRequestsFromMapFunc(s.vmisOfVM),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(event.CreateEvent) bool { return false },
				UpdateFunc:  func(event.UpdateEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			})).
		WatchesRawSource(source.Channel(s.kicks, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&vmiReconciler{s: s})
	if err != nil {
		return fmt.Errorf("kubevirtsim: setting up the VirtualMachineInstance controller: %w", err)
	}
	return nil
}

// vmsOfVMI maps a VMI to the VM of the same name, which may adopt it, and to
// the VM its controller reference names.
func vmsOfVMI(_ context.Context, o client.Object) []reconcile.Request {
	reqs := []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	for _, ref := range o.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller && isVMRef(ref) && ref.Name != o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}})
		}
	}
	return reqs
}

// vmisOfVM maps a deleted VM to the VMIs it owned.
func (s *Simulator) vmisOfVM(ctx context.Context, o client.Object) []reconcile.Request {
	reqs := []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
	list := &kubevirtv1.VirtualMachineInstanceList{}
	if err := s.client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{ownerVMIndex: string(o.GetUID())}); err != nil {
		s.log.Error(err, "Listing the VMIs of a deleted VM", "vm", client.ObjectKeyFromObject(o))
		return reqs
	}
	for i := range list.Items {
		if list.Items[i].Name != o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}
