// Package hypervisorcluster reconciles HypervisorClusters: it builds the
// provider from the cluster's Secret, checks the hypervisor on every change and
// every healthCheckInterval, and reports version, nodes and health. A deleted
// cluster, and its Secrets, stay until every machine made through it is
// deleted, or its deletion timeout passes.
package hypervisorcluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// credentialsRefIndex indexes clusters by the Secret names they reference.
const credentialsRefIndex = "hypervisorcluster.credentialsRef"

// Reconciler reconciles HypervisorClusters.
type Reconciler struct {
	Client      client.Client
	Hypervisors *hypervisors.Registry
	Recorder    events.EventRecorder
	// APIReader reads past the cache: the Secrets' metadata (the cache holds
	// only the operator's namespace) and the clusters that may share one.
	APIReader client.Reader
	// Clock stamps status.lastCheckTime and tells the deletion deadline;
	// the real clock unless a test sets one.
	Clock clock.PassiveClock
	// DeletionTimeout bounds how long a deleted cluster waits for its
	// machines to be deleted before it is released with a Warning event
	// (30 min: longer than a claim's own finalization timeout, so claims
	// give up first and the cluster outlives them).
	DeletionTimeout time.Duration
	// RetryCap, when set, caps the pause before a failed check is retried
	// (the provider's hint, else 15 s; at most 30 s after a permanent
	// failure). Production leaves it unset; suites set it so a cleared fault
	// is seen without waiting out the provider's backoff.
	RetryCap time.Duration
	// MaxConcurrentReconciles is the number of workers (DefaultWorkers
	// when zero).
	MaxConcurrentReconciles int
}

// DefaultWorkers: each reconcile asks one cluster's hypervisor, and a hung
// one holds its worker until the call's deadline; with several workers the
// other clusters are checked meanwhile, so one tenant's unreachable
// endpoint does not stall the others' clusters. Clusters are few, so the
// bound costs nothing when all is well.
const DefaultWorkers = 8

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisorclusters,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisorclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisormachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=hypervisorclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;patch
// +kubebuilder:rbac:groups="",namespace=hyperfleet-system,resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler; it also watches the Secrets the
// clusters reference in the operator's namespace (the only Secrets the cache
// holds), so a rotated credential there is picked up at once, and the
// MachineClaims, so a deleting cluster sees its last machine go.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.DeletionTimeout == 0 {
		r.DeletionTimeout = 30 * time.Minute
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = DefaultWorkers
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hypervisorv1alpha1.MachineClaim{}, machinesIndex, indexMachines); err != nil {
		return err
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
		Watches(&hypervisorv1alpha1.MachineClaim{}, handler.EnqueueRequestsFromMapFunc(r.clusterForClaim)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
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

// Reconcile checks one HypervisorCluster, keeping its Secrets readable; a
// deleted one waits for its machines, then lets go of its Secrets and
// itself. The driver forgets its cached provider once it is gone or
// released.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.driver().Reconcile(ctx, req)
}

func (r *Reconciler) driver() *skeleton.Driver[*hypervisorv1alpha1.HypervisorCluster, *scope] {
	return &skeleton.Driver[*hypervisorv1alpha1.HypervisorCluster, *scope]{
		Client:   r.Client,
		Recorder: r.Recorder,
		Kind: skeleton.Kind[*hypervisorv1alpha1.HypervisorCluster, *scope]{
			New: func() *hypervisorv1alpha1.HypervisorCluster { return &hypervisorv1alpha1.HypervisorCluster{} },
			Scope: func(c *hypervisorv1alpha1.HypervisorCluster, patch *skeleton.StatusPatch) *scope {
				return &scope{cluster: c, now: r.Clock.Now(), interval: healthCheckInterval(c), patch: patch}
			},
			Finalizer: Finalizer,
			Phases:    []skeleton.Phase[*scope]{r.keepSecrets, r.connect, r.check},
			Deletion:  []skeleton.Phase[*scope]{r.finalize},
			Status:    computeStatus,
			Events:    r.recordEvents,
			Memory:    []skeleton.Forgetter{r.Hypervisors},
		},
	}
}
