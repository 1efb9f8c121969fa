package runnerpool

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"sync"
	"time"

	ghscaleset "github.com/actions/scaleset"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerlist"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
	"github.com/hyperfleet/hyperfleet/reconcilers/scalesetlistener"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// maxCreatesPerReconcile spreads a burst over several reconciles, so one
// reconcile never spends minutes (and the GitHub budget) in one go. At 25,
// a burst of 100 jobs took four reconciles a second apart and the last
// MachineClaim came 3.5 s after its delivery; at 100 (one reconcile of
// about 1.5 s at createParallelism 16), 1.5-2.0 s (RUNNERS_N=100 go test
// -bench 'RunnerLatency/jobs=100/maxReplicas=100$' ./internal/bench/runners/,
// delivery → MachineClaim created p99).
const maxCreatesPerReconcile = 100

// createParallelism is how many runners one reconcile makes at once. Each
// costs four round trips in a row (GitHub's JIT config or token, the
// Secret, the claim, the hand-over); made one at a time, 25 runners held
// their reconcile for 2.5 s on a loaded 2-core control plane
// (make bench-runners RUNNERS_N=50), and every job queued meanwhile waited.
// With 100 per reconcile, 16 at once made a burst of 100 claims with p99
// 1.5-2.0 s from delivery; 32 made them faster (p99 1.7 s) but crowded out
// the MachineClaim reconciler on the same 2 cores (Create call p99 4.3 s
// against 3.6 s; same benchmark as maxCreatesPerReconcile).
const createParallelism = 16

// scope is one reconcile: the pool, its memory, the time it started, and
// what the phases observed and decided, from which computeStatus writes the
// status. Each fact is recorded in one place.
type scope struct {
	pool *hypervisorv1alpha1.RunnerPool
	key  types.NamespacedName
	mem  *poolMemory
	now  time.Time
	// patch is the reconcile's deferred status write; release lets the
	// pool go through it.
	patch *skeleton.StatusPatch

	// templateMissing: spec.templateRef names no template (getTemplate).
	templateMissing bool
	// attested: the template asks for attestation, so a runner's
	// credential is handed out by the credential endpoint, never put in
	// its user data (getTemplate).
	attested bool
	// bootsRunners: the template boots runner machines by itself
	// (machinespec.BootsRunners), so a JIT runner needs no user data.
	bootsRunners bool
	// runner is what the agents install: the operator's settings with the
	// template's spec.workload.githubRunner over them (getTemplate).
	runner runnerconfig.Runner
	// scaleSets is the pool's scale-set client, in scale-set mode
	// (ensureScaleSet).
	scaleSets *ghscaleset.Client
	// listened is what the pool's listener knows (listen); listenErr why
	// none runs.
	listened  *scalesetlistener.View
	listenErr error
	// scaleSetTaken: the scale set of the pool's name is another pool's.
	scaleSetTaken error
	// githubErr is the failed GitHub call that stopped the reconcile:
	// reading the credentials or listing the runners (connectGitHub).
	githubErr error
	gh        *github.Client
	gscope    github.Scope
	runners   []github.Runner
	// listedAt is when the listing of runners started (real time): every
	// registration made before it is in runners, unless removed since.
	listedAt time.Time
	// finished: runners whose job is recorded Completed (finishedRunners).
	finished map[string]bool
	// obs is the pool's runners as observeRunners sorted them.
	obs *observed
	// demand is the pool's recorded jobs (readJobs), as the poll left them.
	demand *poolDemand
	// pendingDereg counts registrations that could not be removed yet: the
	// orphans retireOrphans failed on, and the runners whose reconciler
	// noted a failed deregistration.
	pendingDereg int
	// scaled is what scale decided, with the demand it scaled for; nil
	// until it ran.
	scaled *scaling
	// createErr is the error that stopped scale making a runner.
	createErr error
	// cleanupErr is why a deleted pool's cleanup is retried (deletion).
	cleanupErr error
	// cleanupLeft counts machines and registrations the cleanup saw left.
	cleanupLeft int
	// leftClaims names the claims still there past the deadline.
	leftClaims []string
	// pastDeadline: the deleted pool's FinalizationTimeout has passed.
	pastDeadline bool
}

// scaling is scale's decision.
type scaling struct {
	desired int
	// queued is the pool's demand: jobs waiting for a runner.
	queued int
}

// observed is the pool's runners as this reconcile found them.
type observed struct {
	pending, idle, busy []*hypervisorv1alpha1.MachineClaim
	// gone: claims whose machine ended or whose runner finished its job.
	gone []*hypervisorv1alpha1.MachineClaim
	// finished: the claims whose runner ran a job (an ephemeral runner
	// deregisters itself after its one job).
	finished []*hypervisorv1alpha1.MachineClaim
	// ending: the claims that are no runner any more and still stand with
	// a machine that has not ended: machines until they end or their claim
	// is deleted, so they count against maxReplicas (room).
	ending []*hypervisorv1alpha1.MachineClaim
	// orphans: registrations with the pool's label and no machine.
	orphans []github.Runner
	byName  map[string]github.Runner
	// unseen: claims this process made that the cache does not show yet.
	unseen int
}

func (o observed) current() int { return len(o.pending) + len(o.idle) + len(o.busy) + o.unseen }

// room is how many machines the pool may add under maxReplicas: the
// runners, and the finished ones whose machine has not ended yet.
func (o observed) room(pool *hypervisorv1alpha1.RunnerPool) int {
	return max(0, int(pool.Spec.MaxReplicas)-o.current()-len(o.ending))
}

// getTemplate checks the pool's template exists; without it no runner can
// be made, so the pool stalls until it is created (looked for again every
// 30 s: templates are not watched).
func (r *Reconciler) getTemplate(ctx context.Context, s *scope) (skeleton.Result, error) {
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.pool.Namespace, Name: s.pool.Spec.TemplateRef.Name}, tmpl); err != nil {
		if apierrors.IsNotFound(err) {
			s.templateMissing = true
			return skeleton.StopAndRequeue(30 * time.Second), nil
		}
		return skeleton.Stop(), err
	}
	a := tmpl.Spec.Attestation
	s.attested = a != nil && a.Method != "" && a.Method != hypervisorv1alpha1.AttestationNone
	s.runner = machinespec.RunnerSettings(r.Runner, tmpl.Spec.Workload)
	s.bootsRunners = machinespec.BootsRunners(tmpl)
	return skeleton.Continue(), nil
}

// connectGitHub reads the pool's credentials and the runners registered in
// its scope: everything after depends on that listing. The listing is the
// one every pool on the same credential and scope shares (at most
// SyncInterval old), so a pool that reconciles on every claim change does
// not list GitHub each time; what an old listing could make wrong is read
// fresh where it is decided (scaleDown, deregisterAll).
func (r *Reconciler) connectGitHub(ctx context.Context, s *scope) (skeleton.Result, error) {
	gh, gscope, err := r.client(ctx, s.pool)
	if err == nil {
		var snap runnerlist.Snapshot
		snap, err = r.Runners.Get(ctx, gh, gscope)
		s.runners, s.listedAt = snap.Runners, snap.Started
	}
	if err != nil {
		s.githubErr = err
		// Refused credentials (or a scope they may not see) take the pool
		// out of routing; a transient failure says nothing about them and
		// keeps what the last listing proved.
		var cred *runnerstate.CredentialsError
		if _, permanent := providers.IsPermanent(err); permanent || errors.As(err, &cred) {
			s.pool.Status.ReachedScope = ""
		}
		_, after := githubOutcome(err)
		return skeleton.StopAndRequeue(after), nil
	}
	// The listing was made with this pool's own credentials (the shared
	// snapshot is per credential and scope), so they reach the scope: from
	// now on the pool may take its jobs (MatchPool).
	s.pool.Status.ReachedScope = scopeKey(s.pool)
	s.gh, s.gscope = gh, gscope
	return skeleton.Continue(), nil
}

// observeRunners sorts the pool's claims by what GitHub says of their
// runners, judged as each runner's own reconciler judges it.
func (r *Reconciler) observeRunners(ctx context.Context, s *scope) (skeleton.Result, error) {
	claims, err := r.claims(ctx, s.pool)
	if err != nil {
		return skeleton.Stop(), err
	}
	r.refreshIfFinished(ctx, s)
	obs := r.observe(s, claims, s.runners)
	s.obs = &obs
	return skeleton.Continue(), nil
}

// retireOrphans removes the registrations of the pool left without a
// machine (a crash between a JIT registration and its claim, a claim
// deleted by hand). Each runner with a claim is retired by its own
// reconciler.
func (r *Reconciler) retireOrphans(ctx context.Context, s *scope) (skeleton.Result, error) {
	for _, rn := range s.obs.orphans {
		if err := r.deregister(ctx, s, s.gh, s.gscope, rn); err != nil {
			s.pendingDereg++
		}
	}
	return skeleton.Continue(), nil
}

// scale makes runners up to the desired count, or removes idle ones above
// it, and says when to look again: soon while runners start, at the next
// idle expiry, else at the sync interval.
func (r *Reconciler) scale(ctx context.Context, s *scope) (skeleton.Result, error) {
	pool, obs := s.pool, *s.obs
	desired := r.desired(s, obs)
	s.scaled = &scaling{desired: desired}
	// The status counts and the gauge describe the demand as it stands
	// once scale has acted on it.
	defer func() {
		s.scaled.queued = s.demand.queued
		if scaleSetMode(pool) {
			// Assigned and not yet taken by a runner, once GitHub said.
			s.scaled.queued = 0
			if v := s.listened; v != nil && v.Known {
				s.scaled.queued = max(0, v.Assigned-len(obs.busy))
			}
		}
		runnerCounts.set(s.key, map[string]int{
			StatePending: len(obs.pending), StateIdle: len(obs.idle), StateBusy: len(obs.busy), StateDeregistering: s.pendingDereg,
		})
	}()
	after := r.SyncInterval
	switch current := obs.current(); {
	case current < desired:
		// A finished runner's machine still ending holds its place under
		// maxReplicas: after a restart (nothing remembered of who was seen
		// online) two such machines stood beside their two replacements,
		// one above maxReplicas.
		made, err := r.createRunners(ctx, s, min(desired-current, maxCreatesPerReconcile, obs.room(pool)))
		if made > 0 {
			r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "ScaledUp", "Scale", "Scaling up from %d to %d runners (%d busy, %d jobs queued)",
				current, current+made, len(obs.busy), s.demand.queued)
		}
		if err != nil {
			s.createErr = err
			return skeleton.StopAndRequeue(retryAfter(err)), nil
		}
		after = 2 * time.Second
	case current > desired:
		asked := r.scaleDown(ctx, s, obs, current-desired)
		if asked > 0 {
			r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "ScaledDown", "Scale", "Retiring %d idle runners (desired %d)", asked, desired)
		}
		if next := r.nextIdleExpiry(s, obs); next > 0 {
			after = min(after, next)
		}
	}
	if len(obs.pending) > 0 {
		after = min(after, 3*time.Second)
	}
	return skeleton.Requeue(after), nil
}

// deleteMachines, the first step of a deleted pool's cleanup, deletes its
// machines (their finalizers delete the VMs) and their bootstrap Secrets.
// The deadline is checked first, and no error stops the cleanup: each is
// recorded for release, which decides with the deadline, so a persistent
// API error delays the pool's deletion by at most FinalizationTimeout. Past
// the deadline nothing more is attempted; the claims are only counted for
// the Warning event.
func (r *Reconciler) deleteMachines(ctx context.Context, s *scope) (skeleton.Result, error) {
	s.pastDeadline = !s.now.Before(r.deletionDeadline(ctx, s))
	claims, err := r.claims(ctx, s.pool)
	if err != nil {
		s.cleanupErr = fmt.Errorf("listing the pool's MachineClaims: %w", err)
		return skeleton.Continue(), nil
	}
	s.cleanupLeft = len(claims)
	if s.pastDeadline {
		for i := range claims {
			s.leftClaims = append(s.leftClaims, claims[i].Name)
		}
		return skeleton.Continue(), nil
	}
	var errs []error
	for i := range claims {
		if err := r.deleteRunnerMachine(ctx, s.pool, &claims[i]); err != nil {
			errs = append(errs, fmt.Errorf("deleting MachineClaim %s: %w", claims[i].Name, err))
		}
	}
	s.cleanupErr = errors.Join(errs...)
	return skeleton.Continue(), nil
}

// deregisterAll removes every registration of the deleted pool; what fails
// is counted and retried. Past the deadline it asks GitHub nothing more.
func (r *Reconciler) deregisterAll(ctx context.Context, s *scope) (skeleton.Result, error) {
	if s.pastDeadline {
		return skeleton.Continue(), nil
	}
	pool := s.pool
	// The listing and the deletes may spend the rate-limit reserve: a
	// deleted pool must not leave registrations because scale-ups spent
	// the budget. The listing starts after the machines were deleted, so
	// it holds every registration they made.
	ctx = github.ForDeregistration(ctx)
	gh, gscope, err := r.client(ctx, pool)
	if err == nil {
		var snap runnerlist.Snapshot
		if snap, err = r.Runners.Fresh(ctx, gh, gscope); err == nil {
			for _, rn := range runnerstate.Ours(pool, snap.Runners) {
				if derr := gh.DeleteRunner(ctx, gscope, rn.ID); derr != nil {
					runnerstate.DeregistrationFailed(s.key)
					err = derr
					s.cleanupLeft++
				}
			}
		}
	}
	s.cleanupErr = errors.Join(s.cleanupErr, err)
	return skeleton.Continue(), nil
}

// release removes the finalizer once nothing is left, or, past the
// deadline, with a Warning event saying what may be left behind.
func (r *Reconciler) release(ctx context.Context, s *scope) (skeleton.Result, error) {
	pool := s.pool
	if s.cleanupLeft > 0 || s.cleanupErr != nil || s.pastDeadline {
		if !s.pastDeadline {
			return skeleton.StopAndRequeue(2 * time.Second), nil
		}
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, "FinalizerDeadlineExceeded", "Delete", "%s", leftBehind(r.FinalizationTimeout, pool, s))
	}
	// The driver forgets the pool's memory, its gauge and its GitHub
	// client once the finalizer is released.
	if err := s.patch.ReleaseFinalizer(ctx, Finalizer); err != nil {
		return skeleton.Stop(), err
	}
	return skeleton.Stop(), nil
}

// observe sorts the pool's claims by what GitHub says of their runners,
// and wakes each runner whose reconciler has something to note or do that
// its claim does not say yet: the listing has no watch, and the pool's
// reconciles are what read it.
func (r *Reconciler) observe(s *scope, claims []hypervisorv1alpha1.MachineClaim, runners []github.Runner) observed {
	pool := s.pool
	obs := observed{byName: map[string]github.Runner{}}
	mine := runnerstate.Ours(pool, runners)
	for _, rn := range mine {
		obs.byName[rn.Name] = rn
	}
	var named map[string]bool
	if s.demand != nil {
		named = s.demand.named
	}
	live := map[string]bool{}
	for i := range claims {
		c := &claims[i]
		live[c.Name] = true
		if c.DeletionTimestamp != nil {
			// Its machine is going; its registration, if any, is an orphan
			// once its claim is gone.
			continue
		}
		if _, failed := c.Annotations[runnerstate.DeregistrationFailedAnnotation]; failed {
			s.pendingDereg++
		}
		rn, registered := obs.byName[c.Name]
		v := runnerstate.Judge(pool, runnerstate.Look{Claim: c, Runner: rn, Registered: registered,
			JobCompleted: s.finished[c.Name], ListedAt: s.listedAt, Now: s.now})
		if r.Wake != nil && needsLook(c, v, named[c.Name] || runnerstate.ScaleSetMode(pool), s.now) {
			r.Wake(c)
		}
		switch {
		case v.State == runnerstate.Pending:
			obs.pending = append(obs.pending, c)
		case v.State == runnerstate.Idle:
			obs.idle = append(obs.idle, c)
		case v.State == runnerstate.Busy:
			obs.busy = append(obs.busy, c)
		case !runnerstate.TerminalPhase(c):
			// Retired or not, it is a machine until its claim is deleted:
			// one its reconciler is about to retire may yet be kept, busy
			// with a job it took since this listing (GitHub refuses to
			// deregister it), and its replacement beside it would go past
			// maxReplicas.
			obs.ending = append(obs.ending, c)
		}
		if v.Gone {
			obs.gone = append(obs.gone, c)
		}
		if v.Finished {
			obs.finished = append(obs.finished, c)
		}
	}
	for name, at := range s.mem.creating {
		switch {
		case live[name], s.now.Sub(at) > time.Minute:
			delete(s.mem.creating, name)
		default:
			obs.unseen++
			live[name] = true // its JIT registration is no orphan either
		}
	}
	for name := range s.mem.refreshedFor {
		if !live[name] {
			delete(s.mem.refreshedFor, name)
		}
	}
	for _, rn := range mine {
		if !live[rn.Name] {
			obs.orphans = append(obs.orphans, rn)
		}
	}
	return obs
}

// needsLook reports whether the runner of claim c, judged v, has something
// its reconciler would note or do: a note its claim does not carry yet, a
// retirement, a retire request to act on.
func needsLook(c *hypervisorv1alpha1.MachineClaim, v runnerstate.Verdict, named bool, now time.Time) bool {
	switch {
	case runnerstate.Retires(c, v, named, now):
		return true
	case runnerstate.RetireRequested(c) && v.State != runnerstate.Pending:
		return true
	}
	return len(runnerstate.NotesToWrite(c, v, named, now)) > 0
}

// desired is the runner count the pool scales to: the floor, raised by
// what the recorded demand needs (poolDemand.want), within min and max.
func (r *Reconciler) desired(s *scope, obs observed) int {
	spec := s.pool.Spec
	floor := int(spec.MinReplicas)
	if spec.Replicas != nil {
		floor = int(*spec.Replicas)
	}
	var want int
	if scaleSetMode(s.pool) {
		// GitHub's count of the jobs assigned to the scale set, running
		// ones included, is the runners it needs (never a count of
		// messages: they are lost, repeated and early).
		want = max(floor, scaleSetDemand(s, obs))
	} else {
		want = max(floor, s.demand.want(obs.busy, obs.finished))
	}
	return max(min(want, int(spec.MaxReplicas)), int(spec.MinReplicas))
}

// deregister removes a runner's registration; a busy runner is refused by
// GitHub (422) and left alone.
func (r *Reconciler) deregister(ctx context.Context, s *scope, gh *github.Client, gscope github.Scope, rn github.Runner) error {
	err := gh.DeleteRunner(ctx, gscope, rn.ID)
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		runnerstate.DeregistrationFailed(client.ObjectKeyFromObject(s.pool))
		return err
	}
	return nil
}

// scaleDown asks the runner reconciler to retire up to n runners GitHub
// reports idle for longer than idleTTL, oldest idle first
// (runnerstate.RetireAnnotation), less those already asked. The runner's
// reconciler reads it fresh right before removing its registration: a
// runner that took a job meanwhile is never killed, and the request is
// taken back. An idle runner asked to retire still counts as the idle
// runner it is until its claim is deleted: it may take a job first (a job
// whose record is still queued), and the pool must not make its
// replacement beside it.
func (r *Reconciler) scaleDown(ctx context.Context, s *scope, obs observed, n int) int {
	ttl := runnerstate.IdleTTL(s.pool)
	var candidates []*hypervisorv1alpha1.MachineClaim
	for _, c := range obs.idle {
		if runnerstate.RetireRequested(c) {
			n--
			continue
		}
		candidates = append(candidates, c)
	}
	sort.Slice(candidates, func(i, j int) bool {
		return idleSince(s, candidates[i]).Before(idleSince(s, candidates[j]))
	})
	asked := 0
	for _, c := range candidates {
		if asked >= n || s.now.Sub(idleSince(s, c)) < ttl {
			break
		}
		patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{runnerstate.RetireAnnotation: runnerstate.FormatTime(s.now)}}}
		if err := r.patchClaim(ctx, c, patch); err != nil {
			if !apierrors.IsNotFound(err) {
				ctrl.LoggerFrom(ctx).Error(err, "Asking a runner to retire failed; asked again by the next reconcile", "claim", c.Name)
			}
			continue
		}
		asked++
	}
	return asked
}

// idleSince is since when c's runner, seen online and idle, has been idle,
// as its reconciler noted; not noted yet, it has just become idle.
func idleSince(s *scope, c *hypervisorv1alpha1.MachineClaim) time.Time {
	if t, ok := runnerstate.NoteTime(c, runnerstate.IdleSinceAnnotation); ok {
		return t
	}
	return s.now
}

// patchClaim merge-patches a claim; the claim as listed is the cache's and
// is not touched.
func (r *Reconciler) patchClaim(ctx context.Context, c *hypervisorv1alpha1.MachineClaim, patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	target := &hypervisorv1alpha1.MachineClaim{}
	target.Namespace, target.Name = c.Namespace, c.Name
	return r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body))
}

// nextIdleExpiry is how long until the next idle runner passes idleTTL.
func (r *Reconciler) nextIdleExpiry(s *scope, obs observed) time.Duration {
	ttl := runnerstate.IdleTTL(s.pool)
	var next time.Duration
	for _, c := range obs.idle {
		left := ttl - s.now.Sub(idleSince(s, c))
		if left > 0 && (next == 0 || left < next) {
			next = left
		}
	}
	return next
}

// createRunners makes n runners, createParallelism at a time, and says how
// many it made; after the first error it starts no more.
func (r *Reconciler) createRunners(ctx context.Context, s *scope, n int) (int, error) {
	var (
		mu    sync.Mutex
		made  int
		first error
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, createParallelism)
	for range n {
		slots <- struct{}{}
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-slots
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			name, err := r.createRunner(ctx, s, s.gh, s.gscope)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmp.Or(first, err)
				return
			}
			s.mem.creating[name] = s.now
			made++
		}()
	}
	wg.Wait()
	return made, first
}

// createRunner makes one runner: fresh registration credentials in a
// bootstrap Secret, then the MachineClaim that boots with it. It returns
// the claim's name once the claim exists. It may run beside others of the
// same reconcile, so it only reads the scope.
func (r *Reconciler) createRunner(ctx context.Context, s *scope, gh *github.Client, gscope github.Scope) (string, error) {
	pool := s.pool
	name := pool.Name + "-" + suffix()
	cfg := runnerconfig.Config{Name: name, RunnerGroup: pool.Spec.RunnerGroup, Runner: s.runner,
		Labels: append(append([]string(nil), pool.Spec.Labels...), runnerstate.PoolRunnerLabel(pool))}
	// JITConfig unless the pool chose RegistrationToken: a pool stored before
	// the default changed reads as JITConfig (the API server defaults it).
	registers := false
	switch {
	case scaleSetMode(pool):
		// The scale set's runner group and labels are the runner's.
		jit, err := r.scaleSetJIT(ctx, s, name)
		if err != nil {
			return "", err
		}
		cfg.JITConfig, cfg.RunnerGroup, cfg.Labels = jit, "", nil
	case pool.Spec.RegistrationMethod != hypervisorv1alpha1.RegistrationToken:
		groupID, err := gh.RunnerGroupID(ctx, gscope, pool.Spec.RunnerGroup)
		if err != nil {
			return "", err
		}
		labels := append(runnerstate.RunnerLabels(pool), runnerstate.PoolRunnerLabel(pool))
		jit, err := gh.GenerateJITConfig(ctx, gscope, github.JITConfigRequest{Name: name, Labels: labels, RunnerGroupID: groupID})
		if err != nil {
			return "", err
		}
		cfg.JITConfig, cfg.RunnerGroup, cfg.Labels = jit.Encoded, "", nil
	default:
		tok, err := r.registrationToken(ctx, gh, gscope)
		if err != nil {
			return "", err
		}
		cfg.Token, cfg.URL = tok.Value, gh.RunnerURL(gscope)
		// config.sh needs the runner's name and labels: in the user data.
		registers = true
	}
	data := map[string]string{}
	var credsRef *meta.SecretKeyReference
	if s.attested {
		// The machine proves who it is before it gets the credential: the
		// user data holds none, and the credential endpoint hands this key
		// out once, to this claim's SVID.
		creds, err := runnerCredentials(&cfg)
		if err != nil {
			return "", err
		}
		data[credentialsKey] = creds
		credsRef = &meta.SecretKeyReference{Name: runnerstate.BootstrapSecretName(name), Key: credentialsKey}
	}
	// A JIT runner of a template that boots runners by itself (a
	// github-runner workload that attests) needs no user data of its own:
	// the claim's machine boots with the template's runner user data
	// (machinespec.RunnerBoot), and everything that makes it this runner
	// is in the JIT config the endpoint hands it. Such a claim can take a
	// standby machine of the template (docs/standby.md).
	var userData *meta.SecretKeyReference
	if !s.bootsRunners || registers {
		ud, err := runnerconfig.UserData(cfg, r.AgentPath)
		if err != nil {
			return "", err
		}
		data[runnerstate.UserDataKey] = ud
		userData = &meta.SecretKeyReference{Name: runnerstate.BootstrapSecretName(name), Key: runnerstate.UserDataKey}
	}
	labels := map[string]string{PoolLabel: pool.Name}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: runnerstate.BootstrapSecretName(name), Namespace: pool.Namespace,
			Labels: map[string]string{PoolLabel: pool.Name, meta.CredentialsLabel: "true", meta.ForClaimLabel: name}},
		Type:       corev1.SecretTypeOpaque,
		StringData: data,
	}
	if err := controllerutil.SetControllerReference(pool, secret, r.Client.Scheme()); err != nil {
		return "", err
	}
	if err := r.Client.Create(providers.WithoutBodies(ctx), secret); err != nil {
		return "", fmt.Errorf("creating the bootstrap Secret: %w", err)
	}
	claim := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pool.Namespace, Labels: labels,
			Annotations: map[string]string{runnerstate.CreatedAtAnnotation: s.now.UTC().Format(time.RFC3339Nano)},
			// Made with it, so the claim's reconciler need not write it.
			Finalizers: []string{hypervisorv1alpha1.MachineClaimFinalizer}},
		Spec: hypervisorv1alpha1.MachineClaimSpec{
			TemplateRef:          hypervisorv1alpha1.TemplateReference{Name: pool.Spec.TemplateRef.Name},
			UserDataSecretRef:    userData,
			CredentialsSecretRef: credsRef,
		},
	}
	if err := controllerutil.SetControllerReference(pool, claim, r.Client.Scheme()); err != nil {
		return "", err
	}
	if err := r.Client.Create(ctx, claim); err != nil {
		_ = r.Client.Delete(ctx, secret)
		return "", fmt.Errorf("creating the MachineClaim: %w", err)
	}
	if err := r.handOver(ctx, secret, claim); err != nil {
		// The pool still owns it and deletes it with the claim.
		ctrl.LoggerFrom(ctx).Error(err, "Handing a bootstrap Secret over to its MachineClaim failed", "claim", claim.Name)
	}
	return name, nil
}

// handOver makes the claim the bootstrap Secret's owner in place of the
// pool, so a claim deleted outside the pool's retire path (kubectl delete)
// takes its Secret with it: the claim's finalizer deletes the Secret it owns
// (machineclaim.deleteOwnedUserData), and the garbage collector would too.
// The Secret is made owned by the pool first, so a crash in between leaves
// it owned by something.
func (r *Reconciler) handOver(ctx context.Context, secret *corev1.Secret, claim *hypervisorv1alpha1.MachineClaim) error {
	patch := client.MergeFrom(secret.DeepCopy())
	secret.OwnerReferences = nil
	if err := controllerutil.SetControllerReference(claim, secret, r.Client.Scheme()); err != nil {
		return err
	}
	return r.Client.Patch(providers.WithoutBodies(ctx), secret, patch)
}

// registrationToken fetches a registration token for one runner. It is
// never kept or given to a second runner: a token registers any number of
// runners for an hour, so one shared across a pool would let a job that
// read it register rogue runners with the pool's labels. One call per
// runner made is what the RegistrationToken method costs the shared budget
// (providers/github/ratelimit.go); JITConfig costs the same call.
func (r *Reconciler) registrationToken(ctx context.Context, gh *github.Client, gscope github.Scope) (github.Token, error) {
	return gh.RegistrationToken(ctx, gscope)
}

// deleteRunnerMachine deletes a claim (its finalizer deletes the VM) and
// the bootstrap Secret that held its registration.
func (r *Reconciler) deleteRunnerMachine(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool, c *hypervisorv1alpha1.MachineClaim) error {
	if c.DeletionTimestamp == nil {
		if err := r.Client.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return r.deleteBootstrapSecret(ctx, pool, c)
}

// deleteBootstrapSecret deletes the Secret that held a runner's registration.
func (r *Reconciler) deleteBootstrapSecret(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool, c *hypervisorv1alpha1.MachineClaim) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: runnerstate.BootstrapSecretName(c.Name), Namespace: pool.Namespace}}
	if err := r.Client.Delete(ctx, secret); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

func (r *Reconciler) claims(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool) ([]hypervisorv1alpha1.MachineClaim, error) {
	var list hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingLabels{PoolLabel: pool.Name}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

func suffix() string {
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	for i := range b {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(letters))))
		b[i] = letters[n.Int64()]
	}
	return string(b)
}
