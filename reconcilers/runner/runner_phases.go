package runner

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// scope is one look at one runner.
type scope struct {
	// claim is the runner's claim as the cache shows it, with the notes
	// this process wrote and the cache does not show yet laid over it.
	claim *hypervisorv1alpha1.MachineClaim
	pool  *hypervisorv1alpha1.RunnerPool
	now   time.Time

	gh     *github.Client
	gscope github.Scope
	look   runnerstate.Look
	// named: a record names this runner as its job's (RunnerJob
	// status.runnerName).
	named   bool
	verdict runnerstate.Verdict
}

// load reads the claim and its pool. A nil scope ends the reconcile: the
// claim is gone, or being deleted (its bootstrap Secret goes with it), or
// its pool is gone or being deleted (the pool's own cleanup removes its
// runners).
func (r *Reconciler) load(ctx context.Context, key types.NamespacedName) (*scope, ctrl.Result, error) {
	c := &hypervisorv1alpha1.MachineClaim{}
	if err := r.Client.Get(ctx, key, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key)
			return nil, ctrl.Result{}, nil
		}
		return nil, ctrl.Result{}, err
	}
	poolName := c.Labels[runnerstate.PoolLabel]
	if poolName == "" {
		return nil, ctrl.Result{}, nil
	}
	if c.DeletionTimestamp != nil {
		// Deleted outside the retire path (kubectl delete): its bootstrap
		// Secret would stay if its own finalizer missed it (a Secret still
		// owned by the pool); its user data was read at boot.
		r.written.Forget(key)
		if _, done := r.deleted.Load(c); done {
			return nil, ctrl.Result{}, nil
		}
		if err := r.deleteBootstrapSecret(ctx, c); err != nil {
			return nil, ctrl.Result{}, err
		}
		r.deleted.Store(c, struct{}{})
		return nil, ctrl.Result{}, nil
	}
	pool := &hypervisorv1alpha1.RunnerPool{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: poolName}, pool); err != nil {
		return nil, ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pool.DeletionTimestamp != nil || !metav1.IsControlledBy(c, pool) {
		return nil, ctrl.Result{}, nil
	}
	s := &scope{claim: r.view(c), pool: pool, now: r.Clock.Now()}
	return s, ctrl.Result{}, nil
}

// connect reads the runner's registration from the pools' shared listing,
// and whether a record names it.
func (r *Reconciler) connect(ctx context.Context, s *scope) (skeleton.Result, error) {
	gh, gscope, err := r.GitHub.Client(ctx, s.pool)
	if err != nil {
		// The pool's status says why; the runner waits for its pool.
		return skeleton.StopAndRequeue(r.SyncInterval), nil
	}
	snap, err := r.Runners.Get(ctx, gh, gscope)
	if err != nil {
		return skeleton.StopAndRequeue(max(providers.RetryAfter(err), 5*time.Second)), nil
	}
	s.gh, s.gscope = gh, gscope
	s.look = runnerstate.Look{Claim: s.claim, ListedAt: snap.Started, Now: s.now}
	for _, rn := range runnerstate.Ours(s.pool, snap.Runners) {
		if rn.Name == s.claim.Name {
			s.look.Runner, s.look.Registered = rn, true
			break
		}
	}
	var jobs hypervisorv1alpha1.RunnerJobList
	if err := r.Client.List(ctx, &jobs, client.InNamespace(s.claim.Namespace), client.MatchingFields{JobRunnerIndex: s.claim.Name}); err != nil {
		return skeleton.Stop(), err
	}
	for i := range jobs.Items {
		if jobs.Items[i].Spec.PoolRef.Name != s.pool.Name {
			continue
		}
		s.named = true
		if jobs.Items[i].Status.State == hypervisorv1alpha1.JobCompleted {
			s.look.JobCompleted = true
		}
	}
	if runnerstate.ScaleSetMode(s.pool) {
		s.named = true // no record is coming to name it
	}
	s.verdict = runnerstate.Judge(s.pool, s.look)
	return skeleton.Continue(), nil
}

// note writes on the claim what this look learned that its notes do not
// say yet.
func (r *Reconciler) note(ctx context.Context, s *scope) (skeleton.Result, error) {
	set := runnerstate.NotesToWrite(s.claim, s.verdict, s.named, s.now)
	if len(set) == 0 {
		return skeleton.Continue(), nil
	}
	if err := r.patchNotes(ctx, s.claim, set); err != nil {
		if apierrors.IsNotFound(err) {
			return skeleton.Stop(), nil
		}
		return skeleton.Stop(), err
	}
	return skeleton.Continue(), nil
}

// act retires the runner when it is over, or when its pool asked and it is
// still idle, and says when to look again.
func (r *Reconciler) act(ctx context.Context, s *scope) (skeleton.Result, error) {
	v, c := s.verdict, s.claim
	requested := runnerstate.RetireRequested(c)
	switch {
	case runnerstate.Retires(c, v, s.named, s.now):
		return r.retire(ctx, s, false)
	case requested && v.State == runnerstate.Idle:
		return r.retire(ctx, s, true)
	case requested && v.State == runnerstate.Busy:
		// It took a job after its pool chose it: it keeps its job.
		return r.takeBack(ctx, s)
	}
	return skeleton.Requeue(r.next(s)), nil
}

// next is when to look at a runner nothing was done to: at its next
// deadline, or at the sync interval.
func (r *Reconciler) next(s *scope) time.Duration {
	after := r.SyncInterval
	age := s.now.Sub(runnerstate.CreatedAt(s.claim))
	switch s.verdict.State {
	case runnerstate.Pending:
		after = min(after, max(runnerstate.RegistrationTimeout(s.pool)-age, 0)+time.Second)
	case runnerstate.Idle:
		if d := runnerstate.MaxLifetime(s.pool); d > 0 {
			after = min(after, max(d-age, 0)+time.Second)
		}
	case runnerstate.None:
		if runnerstate.TerminalPhase(s.claim) && !s.verdict.Gone {
			// Its machine ended while a listing from before still shows
			// its registration: look again at the next listing.
			after = min(after, 2*time.Second)
		}
		if at, ok := runnerstate.NoteTime(s.claim, runnerstate.FinishedAtAnnotation); ok && s.verdict.Finished && !s.named {
			after = min(after, max(runnerstate.FinishedGrace-s.now.Sub(at), 0)+time.Second)
		}
	}
	return after
}

// retire removes the runner: its registration first (so nothing new lands
// on it), then its claim (whose finalizer deletes the machine) and its
// bootstrap Secret. Asked by the pool (scaledDown), the runner is read
// fresh right before, and one that took a job meanwhile is kept: a runner
// is never killed mid-job.
func (r *Reconciler) retire(ctx context.Context, s *scope, scaledDown bool) (skeleton.Result, error) {
	c := s.claim
	if _, done := r.deleted.Load(c); done {
		// Deregistered and deleted by this process already; the cache (and
		// the shared runner listing) do not show it yet.
		return skeleton.Stop(), nil
	}
	if s.look.Registered {
		// The calls that retire a runner may spend the rate-limit reserve:
		// a runner must not stay registered because scale-ups spent the
		// budget.
		gctx := github.ForDeregistration(ctx)
		if scaledDown {
			fresh, err := s.gh.GetRunner(gctx, s.gscope, s.look.Runner.ID)
			switch {
			case errors.Is(err, providers.ErrNotFound):
			case err != nil:
				return skeleton.StopAndRequeue(max(providers.RetryAfter(err), 5*time.Second)), nil
			case fresh.Busy:
				return r.takeBack(ctx, s)
			}
		}
		err := s.gh.DeleteRunner(gctx, s.gscope, s.look.Runner.ID)
		switch {
		case err == nil, errors.Is(err, providers.ErrNotFound):
		case errors.Is(err, github.ErrRunnerBusy) && !runnerstate.TerminalPhase(c):
			// It took a job between the listing and the call.
			if scaledDown {
				return r.takeBack(ctx, s)
			}
			return skeleton.Requeue(r.SyncInterval), nil
		default:
			runnerstate.DeregistrationFailed(client.ObjectKeyFromObject(s.pool))
			if _, noted := c.Annotations[runnerstate.DeregistrationFailedAnnotation]; !noted {
				if nerr := r.patchNotes(ctx, c, map[string]any{runnerstate.DeregistrationFailedAnnotation: runnerstate.FormatTime(s.now)}); nerr != nil {
					ctrl.LoggerFrom(ctx).Error(nerr, "Noting a failed deregistration on the runner's MachineClaim failed", "claim", c.Name)
				}
			}
			return skeleton.StopAndRequeue(max(providers.RetryAfter(err), 5*time.Second)), nil
		}
	}
	if s.verdict.TimedOut {
		r.Recorder.Eventf(s.pool, c, corev1.EventTypeWarning, "RegistrationTimeout", "Retire",
			"Runner %s did not come online within %s; removed its registration and machine", c.Name, runnerstate.RegistrationTimeout(s.pool))
	}
	if err := r.Client.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
		return skeleton.Stop(), err
	}
	if err := r.deleteBootstrapSecret(ctx, c); err != nil {
		return skeleton.Stop(), err
	}
	r.deleted.Store(c, struct{}{})
	return skeleton.Stop(), nil
}

// takeBack withdraws the pool's request to retire a runner that took a
// job: the pool counts it busy again.
func (r *Reconciler) takeBack(ctx context.Context, s *scope) (skeleton.Result, error) {
	if err := r.patchNotes(ctx, s.claim, map[string]any{runnerstate.RetireAnnotation: nil}); err != nil {
		return skeleton.Stop(), client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(s.pool, s.claim, corev1.EventTypeNormal, "ScaleDownSkipped", "Retire",
		"Runner %s took a job before it was removed; it keeps its job", s.claim.Name)
	return skeleton.Requeue(r.SyncInterval), nil
}

// deleteBootstrapSecret deletes the Secret that held a runner's
// registration.
func (r *Reconciler) deleteBootstrapSecret(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: runnerstate.BootstrapSecretName(c.Name), Namespace: c.Namespace}}
	return client.IgnoreNotFound(r.Client.Delete(ctx, secret))
}

// patchNotes merge-patches notes onto a claim (a nil value removes one) and
// remembers them until the cache shows them. The claim in the scope is a
// copy, never the cache's.
func (r *Reconciler) patchNotes(ctx context.Context, c *hypervisorv1alpha1.MachineClaim, set map[string]any) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return err
	}
	target := &hypervisorv1alpha1.MachineClaim{}
	target.Namespace, target.Name = c.Namespace, c.Name
	if err := r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body)); err != nil {
		return err
	}
	r.remember(c, set)
	return nil
}
