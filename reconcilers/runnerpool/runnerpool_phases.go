package runnerpool

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"sync"
	"time"

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
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// userDataKey is the bootstrap Secret's key a claim's userDataSecretRef names.
const userDataKey = "user-data"

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

// retireParallelism is how many finished runners one reconcile removes at
// once, and maxRetiresPerReconcile how many at most. Each removal is up to
// three round trips in a row (the registration, the claim, its bootstrap
// Secret), and the pool's scale-up runs after them in the same reconcile:
// removed one at a time, the 130 runners a 500-job burst had finished took
// 25.7 s, and the jobs still queued waited for it (Create call p99 55-66 s;
// 18.2 s with these; RUNNERS_N=500 go test -bench
// 'RunnerLatency/jobs=500/maxReplicas=500$' ./internal/bench/runners/).
// The same 16 as createParallelism.
const (
	retireParallelism      = 16
	maxRetiresPerReconcile = 100
)

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
	// runner is what the agents install: the operator's settings with the
	// template's spec.workload.githubRunner over them (getTemplate).
	runner runnerconfig.Runner
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
	// listed is the pool's claims as observeRunners listed them, by name.
	listed map[string]*hypervisorv1alpha1.MachineClaim
	// demand is the pool's recorded jobs (readJobs), as the poll left them.
	demand *poolDemand
	// pendingDereg counts registrations retireFinished could not remove yet.
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
	// finished: the gone claims whose runner ran a job (an ephemeral
	// runner deregisters itself after its one job).
	finished []*hypervisorv1alpha1.MachineClaim
	// ending: once retireFinished ran, the claims that are no runner any
	// more (finished, or retired but refused) and still stand with a
	// machine that has not ended: machines until they end, so they count
	// against maxReplicas (room).
	ending []*hypervisorv1alpha1.MachineClaim
	// deleting: claims being deleted, by the pool or by someone else.
	deleting []*hypervisorv1alpha1.MachineClaim
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
	s.runner = runnerSettings(r.Runner, tmpl.Spec.Workload)
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
		var cred *credentialsError
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

// observeRunners sorts the pool's claims by what GitHub says of their runners.
func (r *Reconciler) observeRunners(ctx context.Context, s *scope) (skeleton.Result, error) {
	claims, err := r.claims(ctx, s.pool)
	if err != nil {
		return skeleton.Stop(), err
	}
	r.refreshIfFinished(ctx, s)
	s.listed = make(map[string]*hypervisorv1alpha1.MachineClaim, len(claims))
	for i := range claims {
		s.listed[claims[i].Name] = &claims[i]
	}
	obs := r.observe(s, claims, s.runners)
	s.obs = &obs
	return skeleton.Continue(), nil
}

// retireFinished removes what is over: finished runners, ended machines,
// registrations that never came online in time, idle runners past their
// lifetime, and registrations left without a machine.
func (r *Reconciler) retireFinished(ctx context.Context, s *scope) (skeleton.Result, error) {
	holding, finished := map[string]bool{}, make(map[string]bool, len(s.obs.finished))
	for _, c := range s.obs.finished {
		finished[c.Name] = true
		if r.holdFinished(s, c) {
			holding[c.Name] = true
		}
	}
	// A claim no longer finished starts its hold afresh should it finish
	// again.
	for name, c := range s.listed {
		if !finished[name] && c.DeletionTimestamp == nil {
			s.mem.removeNote(c, finishedAtAnnotation)
		}
	}
	var retiring []*hypervisorv1alpha1.MachineClaim
	for _, c := range s.obs.gone {
		if !holding[c.Name] {
			retiring = append(retiring, c)
		}
	}
	res := skeleton.Continue()
	if len(retiring) > maxRetiresPerReconcile {
		// The rest are retired by the next reconcile, soon: they no
		// longer count as runners, so nothing waits on them.
		retiring = retiring[:maxRetiresPerReconcile]
		res = skeleton.Requeue(2 * time.Second)
	}
	gone, failed := r.retireAll(ctx, s, retiring)
	s.pendingDereg += failed
	s.obs.ending = standing(s.obs, gone)
	for _, rn := range s.obs.orphans {
		if err := r.deregister(ctx, s, s.gh, s.gscope, rn); err != nil {
			s.pendingDereg++
		}
	}
	// A claim deleted outside the retire path (kubectl delete) would leave
	// its bootstrap Secret behind if its own finalizer missed it (an older
	// Secret still owned by the pool); its user data was read at boot.
	for _, c := range s.obs.deleting {
		if err := r.deleteBootstrapSecret(ctx, s.pool, c); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Deleting a runner's bootstrap Secret failed", "claim", c.Name)
		}
	}
	return res, nil
}

// standing are the claims sorted as gone or finished that still stand
// with a machine that may run: not retired now (retired), not kept busy,
// not ended.
func standing(obs *observed, retired map[string]bool) []*hypervisorv1alpha1.MachineClaim {
	seen := map[string]bool{}
	for _, c := range obs.busy {
		seen[c.Name] = true
	}
	var out []*hypervisorv1alpha1.MachineClaim
	for _, c := range append(obs.gone[:len(obs.gone):len(obs.gone)], obs.finished...) {
		if seen[c.Name] || retired[c.Name] || terminalPhase(c) {
			continue
		}
		seen[c.Name] = true
		out = append(out, c)
	}
	return out
}

// terminalPhase reports whether a claim's machine ended.
func terminalPhase(c *hypervisorv1alpha1.MachineClaim) bool {
	return c.Status.Phase == hypervisorv1alpha1.MachineTerminated || c.Status.Phase == hypervisorv1alpha1.MachineFailed
}

// retireAll retires claims, retireParallelism at a time, and returns those
// it retired, by name, and how many registrations could not be removed yet.
func (r *Reconciler) retireAll(ctx context.Context, s *scope, claims []*hypervisorv1alpha1.MachineClaim) (done map[string]bool, failed int) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	done = map[string]bool{}
	// The goroutines read this copy; s.obs.busy grows under mu.
	obs := *s.obs
	slots := make(chan struct{}, retireParallelism)
	for _, c := range claims {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			outcome := r.retire(ctx, s, s.gh, s.gscope, obs, c)
			mu.Lock()
			defer mu.Unlock()
			switch outcome {
			case notRetiredYet:
				failed++
			case keptBusy:
				// It took a job since the listing this reconcile sorted by:
				// it stays, and counts as the busy runner it is, or the pool
				// would make its replacement beside it and go past
				// maxReplicas.
				s.obs.busy = append(s.obs.busy, c)
			case retired:
				done[c.Name] = true
				s.mem.forgetRunner(c.Name)
			}
		}()
	}
	wg.Wait()
	return done, failed
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
		removed := r.scaleDown(ctx, s, s.gh, s.gscope, obs, current-desired)
		if removed > 0 {
			r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "ScaledDown", "Scale", "Removed %d idle runners (desired %d)", removed, desired)
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
			for _, rn := range ours(pool, snap.Runners) {
				if derr := gh.DeleteRunner(ctx, gscope, rn.ID); derr != nil {
					deregistrationFailures.WithLabelValues(s.key.String()).Inc()
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

// observe sorts the pool's claims by what GitHub says of their runners.
func (r *Reconciler) observe(s *scope, claims []hypervisorv1alpha1.MachineClaim, runners []github.Runner) observed {
	pool := s.pool
	obs := observed{byName: map[string]github.Runner{}}
	mine := ours(pool, runners)
	for _, rn := range mine {
		obs.byName[rn.Name] = rn
	}
	live := map[string]bool{}
	for i := range claims {
		c := &claims[i]
		live[c.Name] = true
		if c.DeletionTimestamp != nil {
			// Its machine is going; its registration goes below if needed,
			// and its bootstrap Secret in retireFinished.
			obs.deleting = append(obs.deleting, c)
			continue
		}
		rn, registered := obs.byName[c.Name]
		v := judge(pool, runnerLook{claim: c, runner: rn, registered: registered, seenOnline: seenOnline(s, c),
			jobCompleted: s.finished[c.Name], listedAt: s.listedAt, now: s.now})
		if v.online {
			noteOnline(s, c)
			if v.state == runnerBusy {
				s.mem.removeNote(c, idleSinceAnnotation)
			} else if _, ok := s.mem.noteTime(c, idleSinceAnnotation); !ok {
				s.mem.setNote(c, idleSinceAnnotation, s.now)
			}
		}
		if v.timedOut {
			r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, "RegistrationTimeout", "Scale",
				"Runner %s did not come online within %s; removing its registration and machine", c.Name, registrationTimeout(pool))
		}
		switch v.state {
		case runnerPending:
			obs.pending = append(obs.pending, c)
		case runnerIdle:
			obs.idle = append(obs.idle, c)
		case runnerBusy:
			obs.busy = append(obs.busy, c)
		case runnerNone:
		}
		if v.gone {
			obs.gone = append(obs.gone, c)
		}
		if v.finished {
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
	for _, rn := range mine {
		if !live[rn.Name] {
			obs.orphans = append(obs.orphans, rn)
		}
	}
	return obs
}

// desired is the runner count the pool scales to: the floor, raised by
// what the recorded demand needs (poolDemand.want), within min and max.
func (r *Reconciler) desired(s *scope, obs observed) int {
	spec := s.pool.Spec
	floor := int(spec.MinReplicas)
	if spec.Replicas != nil {
		floor = int(*spec.Replicas)
	}
	want := max(floor, s.demand.want(obs.busy, obs.finished))
	return max(min(want, int(spec.MaxReplicas)), int(spec.MinReplicas))
}

// listedAfter reports whether a listing started at listedAt began after
// claim c was made, so it shows the JIT registration made before c if that
// registration still exists. The claim's creationTimestamp is the API
// server's, to the second: a second's margin keeps a claim made just
// before the listing pending rather than finished.
func listedAfter(listedAt time.Time, c *hypervisorv1alpha1.MachineClaim) bool {
	return !listedAt.IsZero() && c.CreationTimestamp.Add(time.Second).Before(listedAt)
}

// ranJob reports whether a claim whose machine ended ran a job: its runner
// was seen online and is no longer registered (it deregistered itself after
// its job). A process that never saw it online (a new leader) takes a JIT
// runner's missing registration as the same sign: a JIT registration exists
// from the claim's creation until the runner removes it after its job.
func ranJob(pool *hypervisorv1alpha1.RunnerPool, c *hypervisorv1alpha1.MachineClaim, registered, seenOnline bool) bool {
	if registered || c.Status.Phase != hypervisorv1alpha1.MachineTerminated {
		return false
	}
	return seenOnline || pool.Spec.RegistrationMethod != hypervisorv1alpha1.RegistrationToken
}

// finishedGrace bounds how long a finished runner whose job no record names
// is kept standing for a queued record: its job's deliveries normally land
// within seconds, a lost one is redelivered or the poll (every minute by
// default) catches up; past this the record is taken at its word.
const finishedGrace = 2 * time.Minute

// holdFinished reports whether finished claim c is kept a while longer
// instead of retired: no record names its runner yet, so it stands for one
// of the jobs recorded queued (poolDemand.want), and its claim is what
// carries that across a failover. Its machine is already stopped.
func (r *Reconciler) holdFinished(s *scope, c *hypervisorv1alpha1.MachineClaim) bool {
	if !s.demand.unrecorded(c) {
		return false
	}
	at, ok := s.mem.noteTime(c, finishedAtAnnotation)
	if !ok {
		at = s.now
		s.mem.setNote(c, finishedAtAnnotation, at)
	}
	return s.now.Sub(at) < finishedGrace
}

// retireOutcome is what retire did with a runner.
type retireOutcome int

const (
	// retired: its registration and machine are gone, or going; the
	// caller forgets the runner (poolMemory.forgetRunner).
	retired retireOutcome = iota
	// keptBusy: GitHub refused the deregistration because the runner is
	// running a job, on a machine that is still there: it keeps its job.
	keptBusy
	// notRetiredYet: the registration could not be removed; retried.
	notRetiredYet
)

// retire removes a claim whose runner is over: registration first (so
// nothing new lands on it), then the machine. It may run beside others of
// the same reconcile, so it only reads the scope.
func (r *Reconciler) retire(ctx context.Context, s *scope, gh *github.Client, gscope github.Scope, obs observed, c *hypervisorv1alpha1.MachineClaim) retireOutcome {
	if rn, ok := obs.byName[c.Name]; ok {
		if err := r.deregister(ctx, s, gh, gscope, rn); err != nil {
			if errors.Is(err, github.ErrRunnerBusy) && !terminalPhase(c) {
				return keptBusy
			}
			return notRetiredYet
		}
	}
	if err := r.deleteRunnerMachine(ctx, s.pool, c); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Deleting a runner's MachineClaim failed", "claim", c.Name)
	}
	return retired
}

// forgetRunner drops what the pool remembered of a runner it removed; its
// notes go with its claim.
func (m *poolMemory) forgetRunner(name string) {
	delete(m.notes, name)
	delete(m.refreshedFor, name)
}

// deregister removes a runner's registration; a busy runner is refused by
// GitHub (422) and left alone.
func (r *Reconciler) deregister(ctx context.Context, s *scope, gh *github.Client, gscope github.Scope, rn github.Runner) error {
	err := gh.DeleteRunner(ctx, gscope, rn.ID)
	if err != nil && !errors.Is(err, providers.ErrNotFound) {
		deregistrationFailures.WithLabelValues(client.ObjectKeyFromObject(s.pool).String()).Inc()
		return err
	}
	return nil
}

// scaleDown removes up to n runners GitHub reports idle for longer than
// idleTTL, oldest idle first, each checked again immediately before its
// deregistration: a runner that took a job meanwhile is never killed.
func (r *Reconciler) scaleDown(ctx context.Context, s *scope, gh *github.Client, gscope github.Scope, obs observed, n int) int {
	ttl := idleTTL(s.pool)
	candidates := append([]*hypervisorv1alpha1.MachineClaim(nil), obs.idle...)
	sort.Slice(candidates, func(i, j int) bool {
		return idleSince(s, candidates[i]).Before(idleSince(s, candidates[j]))
	})
	removed := 0
	for _, c := range candidates {
		if removed == n || s.now.Sub(idleSince(s, c)) < ttl {
			break
		}
		// The read that decides the deletion may spend the reserve with it.
		fresh, err := gh.GetRunner(github.ForDeregistration(ctx), gscope, obs.byName[c.Name].ID)
		if err != nil || fresh.Busy {
			continue
		}
		if err := gh.DeleteRunner(ctx, gscope, fresh.ID); err != nil {
			continue // ErrRunnerBusy: it took a job between the two calls
		}
		if err := r.deleteRunnerMachine(ctx, s.pool, c); err != nil {
			continue
		}
		s.mem.forgetRunner(c.Name)
		removed++
	}
	return removed
}

// nextIdleExpiry is how long until the next idle runner passes idleTTL.
func (r *Reconciler) nextIdleExpiry(s *scope, obs observed) time.Duration {
	ttl := idleTTL(s.pool)
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
		Labels: append(append([]string(nil), pool.Spec.Labels...), poolRunnerLabel(pool))}
	// JITConfig unless the pool chose RegistrationToken: a pool stored before
	// the default changed reads as JITConfig (the API server defaults it).
	if pool.Spec.RegistrationMethod != hypervisorv1alpha1.RegistrationToken {
		groupID, err := gh.RunnerGroupID(ctx, gscope, pool.Spec.RunnerGroup)
		if err != nil {
			return "", err
		}
		labels := append(RunnerLabels(pool), poolRunnerLabel(pool))
		jit, err := gh.GenerateJITConfig(ctx, gscope, github.JITConfigRequest{Name: name, Labels: labels, RunnerGroupID: groupID})
		if err != nil {
			return "", err
		}
		cfg.JITConfig, cfg.RunnerGroup, cfg.Labels = jit.Encoded, "", nil
	} else {
		tok, err := r.registrationToken(ctx, gh, gscope)
		if err != nil {
			return "", err
		}
		cfg.Token, cfg.URL = tok.Value, gh.RunnerURL(gscope)
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
		credsRef = &meta.SecretKeyReference{Name: bootstrapSecretName(name), Key: credentialsKey}
	}
	ud, err := runnerconfig.UserData(cfg, r.AgentPath)
	if err != nil {
		return "", err
	}
	data[userDataKey] = ud
	labels := map[string]string{PoolLabel: pool.Name}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstrapSecretName(name), Namespace: pool.Namespace,
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
			Annotations: map[string]string{createdAtAnnotation: s.now.UTC().Format(time.RFC3339Nano)},
			// Made with it, so the claim's reconciler need not write it.
			Finalizers: []string{hypervisorv1alpha1.MachineClaimFinalizer}},
		Spec: hypervisorv1alpha1.MachineClaimSpec{
			TemplateRef:          hypervisorv1alpha1.TemplateReference{Name: pool.Spec.TemplateRef.Name},
			UserDataSecretRef:    &meta.SecretKeyReference{Name: secret.Name, Key: userDataKey},
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
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: bootstrapSecretName(c.Name), Namespace: pool.Namespace}}
	if err := r.Client.Delete(ctx, secret); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// bootstrapSecretName is the bootstrap Secret of the runner claim.
func bootstrapSecretName(claim string) string { return claim + "-bootstrap" }

func (r *Reconciler) claims(ctx context.Context, pool *hypervisorv1alpha1.RunnerPool) ([]hypervisorv1alpha1.MachineClaim, error) {
	var list hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingLabels{PoolLabel: pool.Name}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// ours are the registrations carrying the pool's own label.
func ours(pool *hypervisorv1alpha1.RunnerPool, runners []github.Runner) []github.Runner {
	return runnerlist.Labelled(runners, poolRunnerLabel(pool))
}

// poolRunnerLabel marks a pool's registrations, so the pool finds its
// runners (and their orphans) among everything else registered in the scope.
func poolRunnerLabel(pool *hypervisorv1alpha1.RunnerPool) string {
	uid := strings.ReplaceAll(string(pool.UID), "-", "")
	if len(uid) > 12 {
		uid = uid[:12]
	}
	return "hyperfleet-pool-" + uid
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

func idleTTL(p *hypervisorv1alpha1.RunnerPool) time.Duration {
	if d := p.Spec.IdleTTL; d != nil {
		return d.Duration
	}
	return 10 * time.Minute
}

func maxLifetime(p *hypervisorv1alpha1.RunnerPool) time.Duration {
	if d := p.Spec.MaxLifetime; d != nil {
		return d.Duration
	}
	return 24 * time.Hour
}

func registrationTimeout(p *hypervisorv1alpha1.RunnerPool) time.Duration {
	if d := p.Spec.RegistrationTimeout; d != nil {
		return d.Duration
	}
	return 15 * time.Minute
}

// createdAtAnnotation records when the pool made a runner's claim, by the
// reconciler's own clock. Registration timeout and maxLifetime are measured
// from it, so they agree with every other time the pool compares (idle
// since, poll due), which come from the same clock. With the real clock it
// equals the claim's creationTimestamp.
const createdAtAnnotation = "hyperfleet.io/runner-created-at"

// createdAt is when the pool made c: its annotation, or, for a claim made
// before the annotation existed, its creationTimestamp.
func createdAt(c *hypervisorv1alpha1.MachineClaim) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, c.Annotations[createdAtAnnotation]); err == nil {
		return t
	}
	return c.CreationTimestamp.Time
}
