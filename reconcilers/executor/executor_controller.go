// Package executor reconciles HourglassExecutors: the executor Deployment of
// an EigenLayer AVS and the ConfigMap with its configuration (aggregator,
// chains, the performers it may use), with the operator keys mounted from a
// Secret the operator never reads. A changed configuration rolls the
// Deployment through a hash in its Pod template.
package executor

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Reconciler reconciles HourglassExecutors.
type Reconciler struct {
	Client client.Client
	// APIReader checks that the keys Secret exists, reading its metadata
	// only. The operator watches no Secrets outside its own namespace, so a
	// missing Secret is looked for again on a schedule (SecretRetryInterval).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// ClusterDomain is the DNS suffix of the performers' Services.
	ClusterDomain string
	// SecretRetryInterval is the longest wait before a missing keys Secret
	// is looked for again (30 s). Early on it is looked for more often: an
	// ExternalSecret applied with the executor usually syncs in seconds.
	SecretRetryInterval time.Duration
	// MaxConcurrentReconciles is the number of workers.
	MaxConcurrentReconciles int
	// announced is the configuration hash last announced per executor.
	announced skeleton.Memory[string]
}

// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=hourglassexecutors,verbs=get;list;watch
// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=hourglassexecutors/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=hourglassexecutors/finalizers,verbs=update
// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=performers,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.ClusterDomain == "" {
		r.ClusterDomain = performer.DefaultClusterDomain
	}
	if r.SecretRetryInterval <= 0 {
		r.SecretRetryInterval = 30 * time.Second
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	registerMetrics(mgr.GetClient())
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 2
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&hourglassv1alpha1.HourglassExecutor{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ConfigMap{}).
		// The configuration lists the performers: one appearing, leaving or
		// changing its labels or spec changes it. Status churn does not.
		Watches(&hourglassv1alpha1.Performer{}, handler.EnqueueRequestsFromMapFunc(r.executorsInNamespace),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// executorsInNamespace: any executor of the namespace may select the
// Performer, or have selected it before a label change; there are few.
func (r *Reconciler) executorsInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list hourglassv1alpha1.HourglassExecutorList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, e := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&e)})
	}
	return reqs
}

// scope carries one reconcile's observations from the phases to
// computeStatus.
type scope struct {
	exec *hourglassv1alpha1.HourglassExecutor
	// config is the rendered configuration, configHash its name.
	config     string
	configHash string
	// deployment is the Deployment as the apply returned it (nil: not
	// applied this reconcile).
	deployment *appsv1.Deployment
	// keysFound: the keys Secret exists (nil: not looked at).
	keysFound *bool
}

// phases are the steps of a reconcile, in order.
func (r *Reconciler) phases() []skeleton.Phase[*scope] {
	return []skeleton.Phase[*scope]{r.validateSpec, r.renderConfig, r.applyConfigMap, r.applyDeployment, r.findKeysSecret}
}

// Reconcile drives one executor. Owner references hand the Deployment
// and ConfigMap to the garbage collector: a deleted executor has no
// deletion phase, only its status finalized.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.driver().Reconcile(ctx, req)
}

func (r *Reconciler) driver() *skeleton.Driver[*hourglassv1alpha1.HourglassExecutor, *scope] {
	return &skeleton.Driver[*hourglassv1alpha1.HourglassExecutor, *scope]{
		Client:   r.Client,
		Recorder: r.Recorder,
		Kind: skeleton.Kind[*hourglassv1alpha1.HourglassExecutor, *scope]{
			New: func() *hourglassv1alpha1.HourglassExecutor { return &hourglassv1alpha1.HourglassExecutor{} },
			Scope: func(e *hourglassv1alpha1.HourglassExecutor, _ *skeleton.StatusPatch) *scope {
				return &scope{exec: e}
			},
			Phases: r.phases(),
			Status: computeStatus,
			Events: r.recordEvents,
			Memory: []skeleton.Forgetter{&r.announced},
		},
	}
}
