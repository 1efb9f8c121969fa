// Package hypervisormachinetemplate reconciles HypervisorMachineTemplates: it
// checks the referenced cluster and that the clone source exists on it.
package hypervisormachinetemplate

import (
	"context"
	"sync"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

const clusterRefIndex = "hypervisormachinetemplate.clusterRef"

var registerMetrics sync.Once

// Reconciler reconciles HypervisorMachineTemplates.
type Reconciler struct {
	Client      client.Client
	Hypervisors *hypervisors.Registry
	Recorder    events.EventRecorder
	// MaxConcurrentReconciles is the number of workers (DefaultWorkers
	// when zero).
	MaxConcurrentReconciles int
}

// DefaultWorkers: a template's check asks its hypervisor, and a hung one
// holds its worker until the call's deadline; with several workers the
// templates of other clusters are checked meanwhile. Templates are few, so
// the bound costs nothing when all is well.
const DefaultWorkers = 8

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisormachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisormachinetemplates/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims,verbs=get;list;watch;create;delete

// SetupWithManager registers the reconciler; a cluster's change re-checks its templates.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = DefaultWorkers
	}
	standby.RegisterMetrics()
	registerMetrics.Do(func() { metrics.Registry.MustRegister(standbyCollector{reader: mgr.GetCache()}) })
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hypervisorv1alpha1.HypervisorMachineTemplate{}, clusterRefIndex,
		func(o client.Object) []string {
			return []string{o.(*hypervisorv1alpha1.HypervisorMachineTemplate).Spec.ClusterRef.Name}
		}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&hypervisorv1alpha1.HypervisorMachineTemplate{}).
		Watches(&hypervisorv1alpha1.HypervisorCluster{}, handler.EnqueueRequestsFromMapFunc(r.templatesForCluster)).
		Watches(&hypervisorv1alpha1.MachineClaim{}, handler.EnqueueRequestsFromMapFunc(templateOfStandby)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

func (r *Reconciler) templatesForCluster(ctx context.Context, o client.Object) []reconcile.Request {
	var list hypervisorv1alpha1.HypervisorMachineTemplateList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{clusterRefIndex: o.GetName()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, t := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
	}
	return reqs
}

// Reconcile checks one template. A template has no finalizer: it owns
// nothing outside the API server.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.driver().Reconcile(ctx, req)
}

func (r *Reconciler) driver() *skeleton.Driver[*hypervisorv1alpha1.HypervisorMachineTemplate, *scope] {
	return &skeleton.Driver[*hypervisorv1alpha1.HypervisorMachineTemplate, *scope]{
		Client:   r.Client,
		Recorder: r.Recorder,
		Kind: skeleton.Kind[*hypervisorv1alpha1.HypervisorMachineTemplate, *scope]{
			New: func() *hypervisorv1alpha1.HypervisorMachineTemplate {
				return &hypervisorv1alpha1.HypervisorMachineTemplate{}
			},
			Scope: func(t *hypervisorv1alpha1.HypervisorMachineTemplate, _ *skeleton.StatusPatch) *scope {
				return &scope{template: t}
			},
			Phases: []skeleton.Phase[*scope]{r.keepStandby, r.readCluster, r.connect, r.checkSource},
			Status: computeStatus,
			Events: r.recordEvents,
		},
	}
}
