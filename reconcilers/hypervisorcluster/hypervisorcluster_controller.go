// Package hypervisorcluster reconciles HypervisorClusters: it builds the
// provider from the cluster's Secret, checks the hypervisor on every change and
// every healthCheckInterval, and reports version, nodes and health.
package hypervisorcluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
)

// credentialsRefIndex indexes clusters by the Secret names they reference.
const credentialsRefIndex = "hypervisorcluster.credentialsRef"

// Reconciler reconciles HypervisorClusters.
type Reconciler struct {
	Client      client.Client
	Hypervisors *hypervisors.Registry
	Recorder    events.EventRecorder
	Clock       clock.PassiveClock
}

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisorclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisorclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",namespace=hyperfleet-system,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler; it also watches the Secrets the
// clusters reference in the operator's namespace (the only Secrets the cache
// holds), so a rotated credential there is picked up at once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &hypervisorv1alpha1.HypervisorCluster{}, credentialsRefIndex,
		func(o client.Object) []string {
			c := o.(*hypervisorv1alpha1.HypervisorCluster)
			var names []string
			if c.Spec.CredentialsRef != nil {
				names = append(names, c.Spec.CredentialsRef.Name)
			}
			if c.Spec.TLS != nil && c.Spec.TLS.CABundleRef != nil {
				names = append(names, c.Spec.TLS.CABundleRef.Name)
			}
			return names
		})
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&hypervisorv1alpha1.HypervisorCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.clustersForSecret)).
		Complete(r)
}

func (r *Reconciler) clustersForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list hypervisorv1alpha1.HypervisorClusterList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{credentialsRefIndex: o.GetName()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return reqs
}

// Reconcile checks one HypervisorCluster.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &hypervisorv1alpha1.HypervisorCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			r.Hypervisors.Forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	before := cluster.DeepCopy()
	obs := r.observe(ctx, cluster)
	r.setStatus(cluster, obs)
	r.recordTransition(before, cluster)
	if err := conditions.PatchStatus(ctx, r.Client, before, cluster); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: obs.requeueAfter}, nil
}

// observation is what one reconcile learned.
type observation struct {
	err          error
	info         *clusterInfo
	requeueAfter time.Duration
}

type clusterInfo struct {
	version  string
	nodes    []hypervisorv1alpha1.ClusterNode
	machines int
}

func (r *Reconciler) observe(ctx context.Context, cluster *hypervisorv1alpha1.HypervisorCluster) observation {
	interval := 5 * time.Minute
	if d := cluster.Spec.HealthCheckInterval; d != nil && d.Duration > 0 {
		interval = d.Duration
	}
	log := ctrl.LoggerFrom(ctx)
	p, err := r.Hypervisors.For(ctx, cluster)
	if err != nil {
		return observation{err: err, requeueAfter: retryAfter(err, interval)}
	}
	log.V(1).Info("Checking the hypervisor", "provider", cluster.Spec.Provider, "endpoint", cluster.Spec.Endpoint)
	info, err := p.Check(ctx)
	if err != nil {
		return observation{err: err, requeueAfter: retryAfter(err, interval)}
	}
	ci := &clusterInfo{version: info.Version}
	for _, n := range info.Nodes {
		ci.nodes = append(ci.nodes, hypervisorv1alpha1.ClusterNode{
			Name: n.Name, Online: n.Online, CPUs: int32(n.CPUs), //nolint:gosec // CPU counts fit int32
			MemoryTotalBytes: n.MemoryTotal, MemoryFreeBytes: n.MemoryFree,
		})
	}
	if machines, err := p.List(ctx); err == nil {
		ci.machines = len(machines)
	}
	return observation{info: ci, requeueAfter: interval}
}

// retryAfter: a transient failure retries at the provider's hint (else 15 s);
// a permanent one waits for the health-check interval, at most 30 s: Secrets
// outside the operator's namespace are not watched, so a fixed or rotated
// credential is noticed by looking again.
func retryAfter(err error, interval time.Duration) time.Duration {
	if _, permanent := providers.IsPermanent(err); permanent {
		return min(interval, 30*time.Second)
	}
	if d := providers.RetryAfter(err); d > 0 {
		return d
	}
	return 15 * time.Second
}

func (r *Reconciler) recordTransition(before, after *hypervisorv1alpha1.HypervisorCluster) {
	oldReason, _ := conditions.ReadyMessage(before)
	reason, msg := conditions.ReadyMessage(after)
	if reason == oldReason {
		return
	}
	kind := corev1.EventTypeNormal
	if !conditions.IsReady(after, after.Generation) {
		kind = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(after, nil, kind, reason, "Check", "%s", msg)
}
