// Package hypervisormachinetemplate reconciles HypervisorMachineTemplates: it
// checks the referenced cluster and that the clone source exists on it.
package hypervisormachinetemplate

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
)

const clusterRefIndex = "hypervisormachinetemplate.clusterRef"

// recheckInterval re-checks that the source still exists on the hypervisor.
const recheckInterval = 10 * time.Minute

// Reconciler reconciles HypervisorMachineTemplates.
type Reconciler struct {
	Client      client.Client
	Hypervisors *hypervisors.Registry
	Recorder    events.EventRecorder
}

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisormachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisormachinetemplates/status,verbs=get;update;patch

// SetupWithManager registers the reconciler; a cluster's change re-checks its templates.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hypervisorv1alpha1.HypervisorMachineTemplate{}, clusterRefIndex,
		func(o client.Object) []string {
			return []string{o.(*hypervisorv1alpha1.HypervisorMachineTemplate).Spec.ClusterRef.Name}
		}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&hypervisorv1alpha1.HypervisorMachineTemplate{}).
		Watches(&hypervisorv1alpha1.HypervisorCluster{}, handler.EnqueueRequestsFromMapFunc(r.templatesForCluster)).
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

// Reconcile checks one template.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	t := &hypervisorv1alpha1.HypervisorMachineTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := t.DeepCopy()
	summary, requeue := r.check(ctx, t)
	t.Status.ObservedGeneration = t.Generation
	conditions.Set(t, t.Generation, summary)
	if reason, _ := conditions.ReadyMessage(before); reason != summary.Reason {
		kind := corev1.EventTypeNormal
		if summary.State != conditions.Ready {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(t, nil, kind, summary.Reason, "Check", "%s", summary.Message)
	}
	if err := conditions.PatchStatus(ctx, r.Client, before, t); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func (r *Reconciler) check(ctx context.Context, t *hypervisorv1alpha1.HypervisorMachineTemplate) (conditions.Summary, time.Duration) {
	cluster := &hypervisorv1alpha1.HypervisorCluster{}
	key := types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.ClusterRef.Name}
	if err := r.Client.Get(ctx, key, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return conditions.Summary{State: conditions.Waiting, Reason: meta.DependencyNotFoundReason,
				Message: fmt.Sprintf("HypervisorCluster %s (spec.clusterRef) not found", key.Name)}, 0
		}
		return conditions.Summary{State: conditions.Waiting, Reason: "ClusterUnreadable", Message: err.Error()}, 15 * time.Second
	}
	t.Status.Provider = cluster.Spec.Provider
	if msg := providerMismatch(t, cluster); msg != "" {
		return conditions.Summary{State: conditions.Stalled, Reason: meta.InvalidSpecReason, Message: msg}, 0
	}
	if !conditions.IsReady(cluster, cluster.Generation) {
		_, why := conditions.ReadyMessage(cluster)
		if why == "" {
			why = "its first check has not finished"
		}
		return conditions.Summary{State: conditions.Waiting, Reason: meta.DependencyNotReadyReason,
			Message: fmt.Sprintf("HypervisorCluster %s is not Ready: %s", key.Name, why)}, 0
	}
	p, err := r.Hypervisors.For(ctx, cluster)
	if err != nil {
		return conditions.Summary{State: conditions.Waiting, Reason: meta.DependencyNotReadyReason, Message: err.Error()}, time.Minute
	}
	checker, ok := p.(providers.TemplateChecker)
	if !ok {
		return conditions.Summary{State: conditions.Ready, Reason: meta.SucceededReason, Message: "template accepted"}, 0
	}
	spec, err := machinespec.Resolve(ctx, r.Hypervisors.APIReader, t, nil)
	if err == nil {
		var desc string
		if desc, err = checker.CheckTemplate(ctx, spec); err == nil {
			t.Status.ResolvedSource = desc
		}
	}
	if err != nil {
		if perm, ok := providers.IsPermanent(err); ok {
			return conditions.Summary{State: conditions.Stalled, Reason: perm.Reason, Message: perm.Message}, recheckInterval
		}
		return conditions.Summary{State: conditions.Waiting, Reason: "HypervisorUnreachable", Message: err.Error()}, 30 * time.Second
	}
	return conditions.Summary{State: conditions.Ready, Reason: "SourceFound", Message: "source " + t.Status.ResolvedSource + " found"}, recheckInterval
}

// providerMismatch says why a template's provider section does not fit its cluster.
func providerMismatch(t *hypervisorv1alpha1.HypervisorMachineTemplate, c *hypervisorv1alpha1.HypervisorCluster) string {
	switch {
	case c.Spec.Provider == hypervisorv1alpha1.ProviderProxmox && t.Spec.Proxmox == nil:
		return fmt.Sprintf("HypervisorCluster %s is a proxmox cluster but the template has no spec.proxmox section", c.Name)
	case c.Spec.Provider == hypervisorv1alpha1.ProviderKubeVirt && t.Spec.KubeVirt == nil:
		return fmt.Sprintf("HypervisorCluster %s is a kubevirt cluster but the template has no spec.kubevirt section", c.Name)
	}
	return ""
}
