// Package performer reconciles Performers: one AVS performer Pod behind a
// ClusterIP Service with a stable DNS name, placed on the hardware its
// hardwareRequirements name. A changed spec rolls to a new Pod, which must
// be Ready before the Service moves to it and the old Pod goes; a Pod that
// failed, or stayed Pending too long, is replaced.
package performer

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// DefaultPendingTimeout is how long a Pod may stay Pending before it is
// replaced, as in the original operator.
const DefaultPendingTimeout = 5 * time.Minute

// Reconciler reconciles Performers.
type Reconciler struct {
	Client client.Client
	// APIReader reads past the cache, to confirm no Pod exists before
	// making one (the cache may not show a Pod made a moment ago).
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
}

// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=performers,verbs=get;list;watch
// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=performers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=hourglass.eigenlayer.io,resources=performers/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
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
		r.MaxConcurrentReconciles = 4
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
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// scope carries one reconcile's observations between the phases and into
// the status.
type scope struct {
	perf *hourglassv1alpha1.Performer
	now  time.Time

	// hash names the desired revision; desired is its Pod.
	hash    string
	desired *corev1.Pod
	// current is the live Pod of the desired revision, if any.
	current *corev1.Pod
	// old are live Pods of other revisions.
	old []*corev1.Pod
	// serving is the Ready Pod the Service routes to, of any revision.
	serving *corev1.Pod
	// serviceReady: the Service exists and is ours.
	serviceReady bool

	outcome outcome
	// requeueAfter asks to look again (a Pending Pod's deadline).
	requeueAfter time.Duration
}

func (s *scope) requeueWithin(d time.Duration) {
	if d < time.Second {
		d = time.Second
	}
	if s.requeueAfter == 0 || d < s.requeueAfter {
		s.requeueAfter = d
	}
}

// Reconcile drives one Performer.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	perf := &hourglassv1alpha1.Performer{}
	if err := r.Client.Get(ctx, req.NamespacedName, perf); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := perf.DeepCopy()
	s := &scope{perf: perf, now: r.Clock.Now()}
	defer func() {
		if retErr != nil && (apierrors.IsConflict(retErr) || apierrors.IsAlreadyExists(retErr)) {
			// The cache is behind our own writes: look again shortly,
			// without an error in the log or a flapping condition.
			retErr, result = nil, ctrl.Result{RequeueAfter: time.Second}
			return
		}
		if retErr != nil {
			s.outcome = retrying(s, retErr)
		}
		r.setStatus(s)
		r.recordTransition(before, perf, s)
		if err := conditions.PatchStatus(ctx, r.Client, before, perf); err != nil && retErr == nil {
			retErr = err
		}
	}()

	if !perf.DeletionTimestamp.IsZero() {
		// Owner references hand the Pods and the Service to the garbage
		// collector; making anything now would only race it.
		s.outcome = terminating()
		return ctrl.Result{}, nil
	}
	if err := r.reconcilePods(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: s.requeueAfter}, nil
}
