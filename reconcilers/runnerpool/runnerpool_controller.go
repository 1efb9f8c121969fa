// Package runnerpool reconciles RunnerPools: ephemeral GitHub Actions
// runners, each on its own MachineClaim, between minReplicas and
// maxReplicas, scaled up by queued jobs (webhook deliveries, with a polling
// fallback) and down only through runners GitHub reports idle.
package runnerpool

import (
	"context"
	"strings"
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
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/joblist"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerlist"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
	"github.com/hyperfleet/hyperfleet/reconcilers/scalesetlistener"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Finalizer keeps a pool until its machines are deleted and its runners
// deregistered.
const Finalizer = "hypervisor.hyperfleet.io/runnerpool"

// PoolLabel is on every MachineClaim and bootstrap Secret of a pool.
const PoolLabel = runnerstate.PoolLabel

// DefaultAgentPath is where runner images carry cmd/hyperfleet-bootstrap.
const DefaultAgentPath = "/usr/local/bin/hyperfleet-bootstrap"

// Reconciler reconciles RunnerPools.
type Reconciler struct {
	Client client.Client
	// GitHub connects each pool with its own credentials; the runner
	// reconciler shares it.
	GitHub *runnerstate.GitHub
	// Wake asks the runner reconciler to look at a runner soon (runner.
	// Reconciler.Wake); nil: the runners look on their own schedule.
	Wake func(*hypervisorv1alpha1.MachineClaim)
	// Runners shares one listing of registered runners per credential and
	// scope among the pools; nil: one whose interval is SyncInterval.
	Runners *runnerlist.Cache
	// Jobs shares the demand poll's listing of active jobs per credential
	// and scope among the pools; nil: a new one.
	Jobs *joblist.Cache
	// Demand records the jobs GitHub announces as RunnerJobs; nil: one on
	// the manager's client and APIReader.
	Demand *Demand
	// Listeners hold the scale sets' message sessions (the leader's); nil:
	// pools in scale-set mode wait, saying so.
	Listeners *scalesetlistener.Listeners
	// JobRetention keeps finished RunnerJobs as tombstones (1 h).
	JobRetention time.Duration
	Recorder     events.EventRecorder
	Clock        clock.Clock
	// Runner says which actions runner the agents install.
	Runner runnerconfig.Runner
	// AgentPath is the bootstrap agent's path in the runner images.
	AgentPath string
	// SyncInterval is how often a steady pool re-reads GitHub (15 s).
	SyncInterval time.Duration
	// FinalizationTimeout bounds a deleted pool's cleanup (10 min).
	FinalizationTimeout     time.Duration
	MaxConcurrentReconciles int

	// pools is what each pool's reconciles remember; the driver forgets a
	// pool's when the pool is gone or let go of its finalizer.
	pools skeleton.Memory[*poolMemory]
}

// poolMemory is what a pool's reconciles remember between each other:
// only caches and timers, nothing that a restart would make wrong. What the
// pool learns of each runner is on its claim (runnerstate's notes).
type poolMemory struct {
	// refreshedFor: finished runners a fresh listing was already taken for.
	// Forgotten by a restart, which costs at most one listing more.
	refreshedFor map[string]bool
	// creating holds claims made but not yet seen in the cache, so a
	// reconcile that runs before the cache catches up does not make twins.
	creating map[string]time.Time
	// scaleSetGen and scaleSetAt: the generation whose scale set was last
	// ensured, and when (ensureScaleSet); a restart ensures it once more.
	scaleSetGen int64
	scaleSetAt  time.Time
	lastPoll    time.Time
	// lastJobs is when the job listing the last poll used started, by
	// Jobs' clock: the next poll takes a later one.
	lastJobs time.Time
}

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=runnerpools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=runnerpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=runnerpools/finalizers,verbs=update
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=runnerjobs,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;patch;delete

// SetupWithManager registers the reconciler, its metrics and its watches:
// the pool, its MachineClaims, and its RunnerJobs (the demand any
// replica's webhook receiver, or the poll, records).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.SyncInterval == 0 {
		r.SyncInterval = 15 * time.Second
	}
	if r.Runners == nil {
		// Real time, whatever r.Clock is: it measures how old GitHub's
		// answer is, not a pool's timeouts.
		r.Runners = &runnerlist.Cache{Interval: r.SyncInterval}
	}
	if r.Jobs == nil {
		// Real time too: a pool's poll interval bounds how old GitHub's
		// answer may be.
		r.Jobs = &joblist.Cache{}
	}
	if r.FinalizationTimeout == 0 {
		r.FinalizationTimeout = 10 * time.Minute
	}
	if r.GitHub.Timeout == 0 {
		r.GitHub.Timeout = github.DefaultTimeout
	}
	if r.AgentPath == "" {
		r.AgentPath = DefaultAgentPath
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	if r.Demand == nil {
		r.Demand = &Demand{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}
	}
	if r.JobRetention == 0 {
		r.JobRetention = DefaultJobRetention
	}
	registerMetrics()
	b := ctrl.NewControllerManagedBy(mgr).
		For(&hypervisorv1alpha1.RunnerPool{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&hypervisorv1alpha1.MachineClaim{}, builder.WithPredicates(notNotesOnly())).
		Owns(&hypervisorv1alpha1.RunnerJob{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles})
	if r.Listeners != nil {
		scalesetlistener.RegisterMetrics()
		b = b.WatchesRawSource(source.Channel(r.wakeFromListeners(), &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// wakeFromListeners turns the listeners' news of a pool (its demand
// changed, a job of it started or completed) into a reconcile of the pool.
// A full channel drops the news: the pool is already due to reconcile.
func (r *Reconciler) wakeFromListeners() <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 1024)
	r.Listeners.Wake = func(pool types.NamespacedName) {
		obj := &hypervisorv1alpha1.RunnerPool{}
		obj.Namespace, obj.Name = pool.Namespace, pool.Name
		select {
		case ch <- event.GenericEvent{Object: obj}:
		default:
		}
	}
	return ch
}

func webhookScalingOff(pool *hypervisorv1alpha1.RunnerPool) bool {
	w := pool.Spec.WebhookScaling
	return w != nil && w.Enabled != nil && !*w.Enabled
}

// memory returns what the pool's earlier reconciles remembered, or a new
// memory for a pool not seen before (or made again under the same name).
func (r *Reconciler) memory(pool *hypervisorv1alpha1.RunnerPool) *poolMemory {
	if m, ok := r.pools.Load(pool); ok {
		return m
	}
	m, _ := r.pools.LoadOrStore(pool, newPoolMemory())
	return m
}

func newPoolMemory() *poolMemory {
	return &poolMemory{refreshedFor: map[string]bool{}, creating: map[string]time.Time{}}
}

// forgetter adapts a function to skeleton.Forgetter.
type forgetter func(key types.NamespacedName)

func (f forgetter) Forget(key types.NamespacedName) { f(key) }

// Reconcile drives one pool.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.driver().Reconcile(ctx, req)
}

func (r *Reconciler) driver() *skeleton.Driver[*hypervisorv1alpha1.RunnerPool, *scope] {
	return &skeleton.Driver[*hypervisorv1alpha1.RunnerPool, *scope]{
		Client:   r.Client,
		Recorder: r.Recorder,
		Kind: skeleton.Kind[*hypervisorv1alpha1.RunnerPool, *scope]{
			New: func() *hypervisorv1alpha1.RunnerPool { return &hypervisorv1alpha1.RunnerPool{} },
			Scope: func(pool *hypervisorv1alpha1.RunnerPool, patch *skeleton.StatusPatch) *scope {
				return &scope{pool: pool, key: client.ObjectKeyFromObject(pool), now: r.Clock.Now(), mem: r.memory(pool), patch: patch}
			},
			Finalizer: Finalizer,
			// readJobs before observeRunners: a job recorded completed whose
			// runner the shared listing still shows asks for a fresh one
			// (refreshIfFinished).
			Phases: []skeleton.Phase[*scope]{
				r.getTemplate, r.connectGitHub, r.ensureScaleSet, r.readJobs, r.observeRunners, r.listen, r.pollQueuedJobs, r.pruneJobs, r.retireOrphans, r.scale,
			},
			Deletion: []skeleton.Phase[*scope]{r.deleteMachines, r.deregisterAll, r.deleteScaleSet, r.release},
			Status:   computeStatus,
			Events: func(_ *scope, read, written *hypervisorv1alpha1.RunnerPool, summary conditions.Summary) {
				r.recordTransition(read, written, summary)
			},
			// Forgotten when the pool is gone, and already when it let go
			// of its finalizer: nothing of a released pool is needed again,
			// and its gauge and GitHub client should not wait for the
			// NotFound reconcile to go.
			Memory: []skeleton.Forgetter{
				&r.pools,
				runnerCounts,
				forgetter(r.GitHub.Forget),
				listenerForgetter{r.Listeners},
			},
		},
	}
}

// client returns the GitHub client and scope of a pool.
func (r *Reconciler) client(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool) (*github.Client, github.Scope, error) {
	return r.GitHub.Client(ctx, pool)
}

// notNotesOnly passes every claim event but an update that changed nothing
// but the claim's notes: the runner reconciler's notes and the pool's own
// retire requests say nothing the pool's next look would not see, and a
// burst's notes would otherwise be as many more pool reconciles. What
// matters to the pool reaches it: a claim deleted, a machine ended.
func notNotesOnly() predicate.Predicate {
	return runnerstate.UnlessOnlyAnnotations(func(key string) bool {
		return strings.HasPrefix(key, hypervisorv1alpha1.NotesAnnotationPrefix)
	})
}
