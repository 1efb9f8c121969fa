package runner

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerlist"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// JobRunnerIndex indexes RunnerJobs by status.runnerName, so a runner finds
// the record of its job without listing its pool's.
const JobRunnerIndex = "status.runnerName"

// jobRunner indexes a RunnerJob by the runner GitHub gave its job.
func jobRunner(o client.Object) []string {
	if n := o.(*hypervisorv1alpha1.RunnerJob).Status.RunnerName; n != "" {
		return []string{n}
	}
	return nil
}

// Reconciler reconciles the runners of every pool: the MachineClaims with
// runnerstate.PoolLabel.
type Reconciler struct {
	Client client.Client
	// GitHub connects with the pool's credentials; shared with the pool's
	// reconciler, so both use one client per pool.
	GitHub *runnerstate.GitHub
	// Runners is the pools' shared listing of registered runners.
	Runners  *runnerlist.Cache
	Recorder events.EventRecorder
	Clock    clock.Clock
	// SyncInterval is how often a steady runner is looked at again; its
	// pool wakes it sooner (Wake) when its listing shows a change.
	SyncInterval            time.Duration
	MaxConcurrentReconciles int

	wakes chan event.GenericEvent
	// written holds notes this process wrote that the cache does not show
	// yet; the claim's entry goes with the claim.
	written skeleton.Memory[*notes]
	// deleted holds the claims this process deleted with their bootstrap
	// Secret: a claim is reconciled again before the cache shows its
	// deletion, and at every status write of its finalization after, and
	// each asked for both deletions once more (measured: 2.9 Secret and
	// 1.8 claim DELETEs per runner in a burst of 100 jobs).
	deleted skeleton.Memory[struct{}]
}

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=runnerpools,verbs=get;list;watch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=runnerjobs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=delete

// wakeBuffer bounds the wakes waiting for the controller's queue; a wake
// that finds it full is dropped, and the runner's own requeue (at most
// SyncInterval) looks at it instead.
const wakeBuffer = 4096

// SetupWithManager registers the reconciler over the pools' claims.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults()
	runnerstate.RegisterMetrics()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hypervisorv1alpha1.RunnerJob{}, JobRunnerIndex, jobRunner); err != nil {
		return err
	}
	runners, err := predicate.LabelSelectorPredicate(metav1LabelExists(runnerstate.PoolLabel))
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("runner").
		For(&hypervisorv1alpha1.MachineClaim{}, builder.WithPredicates(runners, notOwnNotesOnly())).
		WatchesRawSource(source.Channel(r.wakes, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

func (r *Reconciler) defaults() {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.SyncInterval == 0 {
		r.SyncInterval = 15 * time.Second
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 16
	}
	if r.wakes == nil {
		r.wakes = make(chan event.GenericEvent, wakeBuffer)
	}
}

// Wake asks for a look at the runner of claim c soon: its pool saw
// something in GitHub's listing that the runner's notes do not say yet, or
// a verdict to act on. Listings have no watch; the pool's reconciles are
// what reads them.
func (r *Reconciler) Wake(c *hypervisorv1alpha1.MachineClaim) {
	r.defaults()
	obj := &hypervisorv1alpha1.MachineClaim{}
	obj.Namespace, obj.Name = c.Namespace, c.Name
	select {
	case r.wakes <- event.GenericEvent{Object: obj}:
	default:
	}
}

// Reconcile looks at one runner.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s, res, err := r.load(ctx, req.NamespacedName)
	if s == nil || err != nil {
		return res, err
	}
	return skeleton.RunPhases(ctx, s, r.connect, r.note, r.act)
}

// forget drops what this process kept of a claim that is gone.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.written.Forget(key)
	r.deleted.Forget(key)
}
