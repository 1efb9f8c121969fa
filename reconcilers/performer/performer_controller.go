// Package performer reconciles Performers: one AVS performer Pod behind a
// ClusterIP Service with a stable DNS name, placed on the hardware its
// hardwareRequirements name. A changed spec rolls to a new Pod, which must
// be Ready before the Service moves to it and the old Pod goes; a Pod that
// failed, or was bound to a node that did not start it in time, is
// replaced; one that finds no node in time stalls the Performer.
package performer

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// DefaultPendingTimeout is how long a Pod may stay Pending, as in the
// original operator: bound to a node before it is replaced, waiting for
// one before the Performer is marked Stalled.
const DefaultPendingTimeout = 5 * time.Minute

// Reconciler reconciles Performers.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache, only where the cache cannot answer:
	// a Pod this process made that the cache does not show yet, a create
	// refused because the name is taken, Pods of the original operator
	// (which the cache does not hold).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Placement turns hardware requirements into scheduling.
	Placement Placement
	// PendingTimeout bounds how long a Pod may stay Pending (5 min).
	PendingTimeout time.Duration
	// ClusterDomain is the Services' DNS suffix (cluster.local).
	ClusterDomain string
	// MaxConcurrentReconciles is the number of workers.
	MaxConcurrentReconciles int

	// adopted holds, per Performer, that adoptLegacy found every one of
	// its Pods in the cache in this process, or presumed it had no Pod of
	// the original operator's (adoption).
	adopted skeleton.Memory[adoption]
	// made holds, per Performer, the Pod this process made last, which the
	// cache may not show yet (create).
	made skeleton.Memory[madePod]
	// written holds, per Performer, the status last written while the
	// cache does not show it yet: Pod events trigger reconciles faster than
	// the cache shows the Performer's own status writes.
	written skeleton.WrittenStatus[*hourglassv1alpha1.Performer]
	// policies serializes and remembers each namespace's NetworkPolicy
	// (networkpolicy.go).
	policies policies
}

// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=performers,verbs=get;list;watch
// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=performers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=performers/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

var registerMetrics sync.Once

// SetupWithManager registers the reconciler and its metrics.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.PendingTimeout <= 0 {
		r.PendingTimeout = DefaultPendingTimeout
	}
	if r.ClusterDomain == "" {
		r.ClusterDomain = DefaultClusterDomain
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 8
	}
	if r.Placement.TEE == nil && r.Placement.GPU.ResourceName == "" {
		r.Placement = DefaultPlacement()
	}
	if err := r.Placement.Validate(); err != nil {
		return err
	}
	registerMetrics.Do(func() {
		metrics.Registry.MustRegister(podRecreations, performersCollector{reader: mgr.GetCache()})
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&hourglassv1alpha1.Performer{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Every Pod change matters: its phase and readiness drive the roll.
		Owns(&corev1.Pod{}).
		Owns(&corev1.Service{}).
		// The namespace's policy has no owner: its events reach the
		// reconciler as a request named after it (policyEvents).
		Watches(&networkingv1.NetworkPolicy{}, r.policyEvents()).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// scope carries one reconcile's observations from the phases to
// computeStatus.
type scope struct {
	perf *hourglassv1alpha1.Performer
	now  time.Time
	// pendingTimeout and clusterDomain are the reconciler's settings the
	// status reports.
	pendingTimeout time.Duration
	clusterDomain  string

	// hash names the desired revision; desired is its Pod.
	hash    string
	desired *corev1.Pod
	// currents are the live Pods of the desired revision as listed;
	// current is the one kept, if any.
	currents []*corev1.Pod
	current  *corev1.Pod
	// old are live Pods of other revisions.
	old []*corev1.Pod
	// serving is the Ready Pod the Service routes to, of any revision.
	serving *corev1.Pod
	// keep are the Pods of older revisions the Service still needs.
	keep map[*corev1.Pod]bool
	// serviceReady: the Service exists and is ours.
	serviceReady bool
	// upgraded: the Service moved to the new revision in this reconcile.
	upgraded bool

	// What stopped the roll short, at most one of these:
	// invalid: the spec (or the placement table) cannot make a Pod;
	invalid *specError
	// starting: a Pod of the desired revision exists that the cache does not show yet;
	starting *corev1.Pod
	// rejected: the API server refused the Pod;
	rejected error
	// serviceConflict: the name of the Service or the NetworkPolicy is
	// taken by someone else's.
	serviceConflict *specError
	// adopting: Pods of this Performer the cache does not show yet (just
	// labelled by adoptLegacy, or just made); the roll waits for them.
	adopting string
}

// phases are the steps of the roll, in order: replace what is dead or
// stuck, make the desired revision's Pod, point the Service at the Ready
// one, and only then remove what no longer serves.
func (r *Reconciler) phases() []skeleton.Phase[*scope] {
	return []skeleton.Phase[*scope]{r.adoptLegacy, r.observePods, r.replaceBroken, r.createPod, r.isolate, r.routeService, r.removeOld}
}

// Reconcile drives one Performer. Owner references hand the Pods and the
// Service to the garbage collector: a deleted Performer has no deletion
// phase (making anything then would only race it), only its status
// finalized.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.driver().Reconcile(ctx, req)
}

func (r *Reconciler) driver() *skeleton.Driver[*hourglassv1alpha1.Performer, *scope] {
	return &skeleton.Driver[*hourglassv1alpha1.Performer, *scope]{
		Client:   r.Client,
		Recorder: r.Recorder,
		Kind: skeleton.Kind[*hourglassv1alpha1.Performer, *scope]{
			New: func() *hourglassv1alpha1.Performer { return &hourglassv1alpha1.Performer{} },
			Scope: func(perf *hourglassv1alpha1.Performer, _ *skeleton.StatusPatch) *scope {
				return &scope{perf: perf, now: r.Clock.Now(), pendingTimeout: r.PendingTimeout, clusterDomain: r.ClusterDomain}
			},
			Phases: r.phases(),
			Status: computeStatus,
			Events: r.recordEvents,
			Memory: []skeleton.Forgetter{&r.adopted, &r.made},
			// A Performer went, or the namespace's policy changed (its
			// events arrive as requests named after it): the policy stays
			// while a Performer does.
			Gone: func(ctx context.Context, key types.NamespacedName) error {
				return r.syncPolicy(ctx, key.Namespace)
			},
			Written: &r.written,
			CopyStatus: func(dst, src *hourglassv1alpha1.Performer) {
				dst.Status = *src.Status.DeepCopy()
			},
		},
	}
}

// requeueWithin asks to look again after d, but not sooner than a second.
func requeueWithin(d time.Duration) time.Duration {
	return max(d, time.Second)
}
