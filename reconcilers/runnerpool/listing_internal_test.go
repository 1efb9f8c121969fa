package runnerpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerlist"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// A shared listing that still shows a runner whose job is recorded
// completed is replaced by a fresh one, once per runner: the pool refills
// the slot at once instead of after the next shared listing.
func TestRefreshIfFinished(t *testing.T) {
	sim := githubsim.New(githubsim.Options{})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	gh, err := github.New(github.Config{BaseURL: sim.URL() + "/", Token: sim.PAT(), RateLimiter: github.NewRateLimiter(github.RateLimiterOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	gscope := github.Scope{Owner: "acme", Repository: "widgets"}
	pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID("0123456789abcdef")}}
	jit, err := gh.GenerateJITConfig(t.Context(), gscope, github.JITConfigRequest{Name: "p-done", Labels: []string{runnerstate.PoolRunnerLabel(pool)}})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Runners: &runnerlist.Cache{Interval: time.Hour}}
	old, err := r.Runners.Get(t.Context(), gh, gscope)
	if err != nil || len(runnerstate.Ours(pool, old.Runners)) != 1 {
		t.Fatalf("the shared listing = %+v, %v; want the runner", old.Runners, err)
	}
	// GitHub removes the ephemeral runner with its job; the record says so.
	if err := gh.DeleteRunner(t.Context(), gscope, jit.Runner.ID); err != nil {
		t.Fatal(err)
	}
	completed := hypervisorv1alpha1.RunnerJob{Status: hypervisorv1alpha1.RunnerJobStatus{State: hypervisorv1alpha1.JobCompleted, RunnerName: "p-done"}}
	s := &scope{pool: pool, mem: &poolMemory{refreshedFor: map[string]bool{}}, gh: gh, gscope: gscope,
		runners: old.Runners, demand: &poolDemand{records: []hypervisorv1alpha1.RunnerJob{completed}}}

	r.refreshIfFinished(t.Context(), s)
	if mine := runnerstate.Ours(pool, s.runners); len(mine) != 0 {
		t.Fatalf("after the refresh the pool still sees %+v", mine)
	}
	if n := sim.Calls(githubsim.EndpointRepoListRunners); n != 2 {
		t.Fatalf("%d listings, want 2 (the shared one and the fresh one)", n)
	}
	// Once per runner: the same old listing again asks nothing more.
	s.runners = old.Runners
	r.refreshIfFinished(t.Context(), s)
	if n := sim.Calls(githubsim.EndpointRepoListRunners); n != 2 {
		t.Fatalf("%d listings: a finished runner asked for a second fresh listing", n)
	}
	// A runner whose job is not completed asks nothing.
	s2 := &scope{pool: pool, mem: &poolMemory{refreshedFor: map[string]bool{}}, gh: gh, gscope: gscope, runners: old.Runners,
		demand: &poolDemand{records: []hypervisorv1alpha1.RunnerJob{{Status: hypervisorv1alpha1.RunnerJobStatus{State: hypervisorv1alpha1.JobInProgress, RunnerName: "p-done"}}}}}
	r.refreshIfFinished(t.Context(), s2)
	if n := sim.Calls(githubsim.EndpointRepoListRunners); n != 2 {
		t.Fatalf("%d listings: a runner still on its job asked for a fresh listing", n)
	}
}

// A claim whose runner the listing does not show is over once its job is
// recorded Completed, even if no listing ever caught the runner online
// (its whole life fit between two shared listings); without that record
// it is still starting.
func TestFinishedRunnerIsGoneWithoutBeingSeenOnline(t *testing.T) {
	pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID("0123456789abcdef")}}
	now := time.Now()
	claim := hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-done", Namespace: "ns", CreationTimestamp: metav1.NewTime(now)},
		Status: hypervisorv1alpha1.MachineClaimStatus{Phase: hypervisorv1alpha1.MachineReady}}
	newScope := func(records ...hypervisorv1alpha1.RunnerJob) *scope {
		s := &scope{pool: pool, now: now, demand: &poolDemand{records: records},
			mem: &poolMemory{refreshedFor: map[string]bool{}, creating: map[string]time.Time{}}}
		s.finished = finishedRunners(s.demand)
		return s
	}
	r := &Reconciler{}
	completed := hypervisorv1alpha1.RunnerJob{Status: hypervisorv1alpha1.RunnerJobStatus{State: hypervisorv1alpha1.JobCompleted, RunnerName: "p-done"}}
	if obs := r.observe(newScope(completed), []hypervisorv1alpha1.MachineClaim{claim}, nil); len(obs.gone) != 1 {
		t.Fatalf("job completed: gone %d, pending %d; want the claim gone", len(obs.gone), len(obs.pending))
	}
	inProgress := completed
	inProgress.Status.State = hypervisorv1alpha1.JobInProgress
	if obs := r.observe(newScope(inProgress), []hypervisorv1alpha1.MachineClaim{claim}, nil); len(obs.pending) != 1 {
		t.Fatalf("job in progress, runner not listed yet: gone %d, pending %d; want the claim kept (pending)", len(obs.gone), len(obs.pending))
	}
}
