package runner

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerlist"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// lab is one pool with one runner claim on a fake API server, its
// credentials reaching a GitHub simulator, and a reconciler for its runner.
type lab struct {
	r     *Reconciler
	c     client.Client
	sim   *githubsim.Server
	gh    *github.Client
	pool  *hypervisorv1alpha1.RunnerPool
	clock *clocktesting.FakeClock

	mu            sync.Mutex
	patches       int
	secretDeletes int
}

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newLab(t *testing.T, phase hypervisorv1alpha1.MachinePhase) *lab {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := hypervisorv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	l := &lab{sim: githubsim.New(githubsim.Options{}), clock: clocktesting.NewFakeClock(t0)}
	if err := l.sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.sim.Close)
	l.pool = &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "0123456789abcdef"}}
	l.pool.Spec.GitHub = hypervisorv1alpha1.GitHubRunnerScope{Owner: "acme", Repository: "widgets", APIURL: l.sim.URL() + "/",
		CredentialsRef: meta.LocalObjectReference{Name: "gh"}}
	claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Namespace: "ns",
		Labels:      map[string]string{runnerstate.PoolLabel: "p"},
		Annotations: map[string]string{runnerstate.CreatedAtAnnotation: runnerstate.FormatTime(t0)}}}
	claim.Status.Phase = phase
	if err := ctrlSetOwner(l.pool, claim, scheme); err != nil {
		t.Fatal(err)
	}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gh", Namespace: "ns", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data: map[string][]byte{github.SecretKeyToken: []byte(l.sim.PAT())}}
	bootstrap := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: runnerstate.BootstrapSecretName("p-a"), Namespace: "ns"}}
	l.c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(l.pool, claim, creds, bootstrap).
		WithIndex(&hypervisorv1alpha1.RunnerJob{}, JobRunnerIndex, jobRunner).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				l.mu.Lock()
				l.patches++
				l.mu.Unlock()
				return c.Patch(ctx, obj, patch, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if _, ok := obj.(*corev1.Secret); ok {
					l.mu.Lock()
					l.secretDeletes++
					l.mu.Unlock()
				}
				return c.Delete(ctx, obj, opts...)
			},
		}).Build()
	l.r = &Reconciler{
		Client: l.c,
		GitHub: &runnerstate.GitHub{Secrets: &credentials.Reader{Reader: l.c}, Clients: github.NewClients(),
			RateLimiter: github.NewRateLimiter(github.RateLimiterOptions{}), Timeout: 5 * time.Second},
		Runners:  &runnerlist.Cache{Interval: time.Hour},
		Recorder: events.NewFakeRecorder(10),
		Clock:    l.clock,
	}
	l.r.defaults()
	gh, err := github.New(github.Config{BaseURL: l.sim.URL() + "/", Token: l.sim.PAT(), RateLimiter: github.NewRateLimiter(github.RateLimiterOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	l.gh = gh
	return l
}

// register gives the claim's runner its JIT registration, as the pool
// does before it makes the claim.
func (l *lab) register(t *testing.T) github.JITConfig {
	t.Helper()
	jit, err := l.gh.GenerateJITConfig(t.Context(), github.Scope{Owner: "acme", Repository: "widgets"},
		github.JITConfigRequest{Name: "p-a", Labels: append(runnerstate.RunnerLabels(l.pool), runnerstate.PoolRunnerLabel(l.pool))})
	if err != nil {
		t.Fatal(err)
	}
	return jit
}

func (l *lab) reconcile(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := l.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "p-a"}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (l *lab) exists(t *testing.T, obj client.Object, name string) bool {
	t.Helper()
	err := l.c.Get(t.Context(), types.NamespacedName{Namespace: "ns", Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// A runner whose machine ended is retired by its own reconciler: its
// registration first, then its claim and its bootstrap Secret.
func TestRunnerOnAnEndedMachineIsRetired(t *testing.T) {
	l := newLab(t, hypervisorv1alpha1.MachineTerminated)
	jit := l.register(t)
	l.reconcile(t)
	if _, ok := l.sim.Runner(jit.Runner.ID); ok {
		t.Fatal("the ended runner's registration is still on GitHub")
	}
	if l.exists(t, &hypervisorv1alpha1.MachineClaim{}, "p-a") {
		t.Fatal("the ended runner's MachineClaim was not deleted")
	}
	if l.exists(t, &corev1.Secret{}, runnerstate.BootstrapSecretName("p-a")) {
		t.Fatal("the ended runner's bootstrap Secret was not deleted")
	}
}

// A runner never seen online is retired at its registration timeout, not
// before, and its reconciler asks to look again at that deadline.
func TestRunnerPastItsRegistrationTimeoutIsRetired(t *testing.T) {
	l := newLab(t, hypervisorv1alpha1.MachineRunning)
	jit := l.register(t)
	res := l.reconcile(t)
	if !l.exists(t, &hypervisorv1alpha1.MachineClaim{}, "p-a") {
		t.Fatal("a runner starting was retired")
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > l.r.SyncInterval {
		t.Fatalf("a starting runner asks to be looked at again after %s, want within %s", res.RequeueAfter, l.r.SyncInterval)
	}
	l.clock.Step(runnerstate.RegistrationTimeout(l.pool) + time.Second)
	l.reconcile(t)
	if l.exists(t, &hypervisorv1alpha1.MachineClaim{}, "p-a") {
		t.Fatal("a runner past its registration timeout was not retired")
	}
	if _, ok := l.sim.Runner(jit.Runner.ID); ok {
		t.Fatal("the timed-out runner's registration is still on GitHub")
	}
}

// A finished runner no record names stands for a queued record for
// FinishedGrace from when it was first held, noted on its claim so a
// restart does not start the hold again; then it is retired.
func TestFinishedRunnerIsHeldThenRetired(t *testing.T) {
	l := newLab(t, hypervisorv1alpha1.MachineTerminated)
	// Never registered now: the JIT runner ran its job and removed its
	// registration, and its machine ended.
	l.reconcile(t)
	c := &hypervisorv1alpha1.MachineClaim{}
	if !l.exists(t, c, "p-a") {
		t.Fatal("a finished runner no record names was retired at once")
	}
	if at, ok := runnerstate.NoteTime(c, runnerstate.FinishedAtAnnotation); !ok || !at.Equal(t0) {
		t.Fatalf("finished-at note %v (%v), want %s", at, ok, t0)
	}
	l.r = &Reconciler{Client: l.c, GitHub: l.r.GitHub, Runners: l.r.Runners, Recorder: l.r.Recorder, Clock: l.clock} // a restart
	l.r.defaults()
	l.clock.Step(runnerstate.FinishedGrace - time.Second)
	l.reconcile(t)
	if !l.exists(t, c, "p-a") {
		t.Fatal("after a restart the hold did not run from its note")
	}
	l.clock.Step(2 * time.Second)
	l.reconcile(t)
	if l.exists(t, c, "p-a") {
		t.Fatal("a finished runner past its hold was not retired")
	}
}

// The notes a reconcile writes are read back by the next one even when
// the cache does not show them yet, and are not written twice.
func TestNotesOverlayAStaleRead(t *testing.T) {
	l := newLab(t, hypervisorv1alpha1.MachineRunning)
	stale := &hypervisorv1alpha1.MachineClaim{}
	if !l.exists(t, stale, "p-a") {
		t.Fatal("no claim")
	}
	if err := l.r.patchNotes(t.Context(), l.r.view(stale), map[string]any{runnerstate.IdleSinceAnnotation: runnerstate.FormatTime(t0)}); err != nil {
		t.Fatal(err)
	}
	seen := l.r.view(stale)
	if at, ok := runnerstate.NoteTime(seen, runnerstate.IdleSinceAnnotation); !ok || !at.Equal(t0) {
		t.Fatalf("a stale read shows idle since %v (%v), want %s", at, ok, t0)
	}
	if set := runnerstate.NotesToWrite(seen, runnerstate.Verdict{State: runnerstate.Idle, Online: true}, false, t0.Add(time.Minute)); len(set) != 1 {
		t.Fatalf("from a stale read the reconciler would write %v; want only seen-online", set)
	}
	fresh := &hypervisorv1alpha1.MachineClaim{}
	l.exists(t, fresh, "p-a")
	l.r.view(fresh)
	if n, ok := l.r.written.Load(fresh); ok && len(n.values) != 0 {
		t.Fatalf("notes the cache shows are still remembered: %v", n.values)
	}
}

func ctrlSetOwner(pool *hypervisorv1alpha1.RunnerPool, c *hypervisorv1alpha1.MachineClaim, scheme *runtime.Scheme) error {
	return controllerutil.SetControllerReference(pool, c, scheme)
}

// A claim that carries a pool's label without being that pool's (a
// tenant's own claim, labelled by hand) is no runner: its reconciler
// neither deregisters a runner of that name with the pool's credentials
// nor deletes the claim.
func TestClaimLabelledButNotControlledIsLeftAlone(t *testing.T) {
	l := newLab(t, hypervisorv1alpha1.MachineTerminated)
	jit := l.register(t)
	c := &hypervisorv1alpha1.MachineClaim{}
	l.exists(t, c, "p-a")
	c.OwnerReferences = nil
	if err := l.c.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	l.reconcile(t)
	if _, ok := l.sim.Runner(jit.Runner.ID); !ok {
		t.Fatal("a registration was removed for a claim its pool does not control")
	}
	if !l.exists(t, c, "p-a") || !l.exists(t, &corev1.Secret{}, runnerstate.BootstrapSecretName("p-a")) {
		t.Fatal("a claim its pool does not control, or its Secret, was deleted")
	}
}

// A claim being deleted is reconciled again before the cache shows it, and
// at each status write of its finalization: its bootstrap Secret is
// deleted once, not at every one, whether the claim was deleted by hand or
// retired by its runner's reconciler.
func TestARunnersSecretIsDeletedOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		phase  hypervisorv1alpha1.MachinePhase
		byHand bool
	}{
		{"deleted by hand", hypervisorv1alpha1.MachineStopping, true},
		{"retired, its machine ended", hypervisorv1alpha1.MachineTerminated, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t, tc.phase)
			claim := &hypervisorv1alpha1.MachineClaim{}
			if !l.exists(t, claim, "p-a") {
				t.Fatal("no claim")
			}
			// Its finalizer keeps it, deleting, for the reconciles below.
			claim.Finalizers = []string{hypervisorv1alpha1.MachineClaimFinalizer}
			if err := l.c.Update(t.Context(), claim); err != nil {
				t.Fatal(err)
			}
			if tc.byHand {
				if err := l.c.Delete(t.Context(), claim); err != nil {
					t.Fatal(err)
				}
			} else {
				l.register(t) // registered, its machine ended: retired at once
			}
			for range 3 {
				l.reconcile(t)
			}
			if !l.exists(t, claim, "p-a") || claim.DeletionTimestamp.IsZero() {
				t.Fatal("the claim is not being deleted")
			}
			if l.exists(t, &corev1.Secret{}, runnerstate.BootstrapSecretName("p-a")) {
				t.Fatal("the runner's bootstrap Secret was not deleted")
			}
			if l.secretDeletes != 1 {
				t.Errorf("three reconciles asked for the Secret's deletion %d times; want once", l.secretDeletes)
			}
		})
	}
}
