package runnerpool_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// A registration with the pool's mark and no claim (a crash between the
// JIT registration and the claim's creation leaves one) is deregistered.
// A registration of another pool with a name like the pool's runners', and
// one of no pool with the pool's own custom label, are left alone, as is
// the pool's own runner.
func TestOrphanRegistrationsAreDeregisteredOnlyWhenTheyAreThePools(t *testing.T) {
	l := newLab(t)
	one := int32(1)
	pool := l.pool("orphans", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Replicas = &one })
	defer func() { _ = l.c.Delete(rootCtx, pool) }()
	own := l.onlyClaim("orphans")
	eventually.That(t, time.Minute, func() (bool, string) {
		p := l.get("orphans")
		return p.Status.IdleReplicas == 1, describe(p)
	})
	api, err := github.New(github.Config{BaseURL: gh.URL() + "/", Token: gh.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	scope := github.Scope{Owner: "acme", Repository: "widgets"}
	register := func(name string, labels ...string) int64 {
		t.Helper()
		jit, err := api.GenerateJITConfig(rootCtx, scope, github.JITConfigRequest{Name: name, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		return jit.Runner.ID
	}
	// The ones to keep first: the listing in which the pool finds its
	// orphan shows them too.
	others := map[string]int64{
		"another pool's": register("orphans-other", "orphans", "hyperfleet-pool-000000000000"),
		"no pool's":      register("orphans-manual", "orphans"),
	}
	defer func() {
		for _, id := range others {
			_ = api.DeleteRunner(rootCtx, scope, id)
		}
	}()
	orphan := register("orphans-crash", append(runnerstate.RunnerLabels(pool), runnerstate.PoolRunnerLabel(pool))...)
	eventually.That(t, time.Minute, func() (bool, string) {
		_, ok := gh.Runner(orphan)
		return !ok, fmt.Sprintf("the orphan %d is still registered; %s", orphan, describe(l.get("orphans")))
	})
	for whose, id := range others {
		if _, ok := gh.Runner(id); !ok {
			t.Errorf("%s registration %d was deregistered", whose, id)
		}
	}
	if cs := l.claims(); len(cs) != 1 || cs[0].Name != own.Name || cs[0].DeletionTimestamp != nil ||
		!slices.ContainsFunc(gh.Runners(), func(r githubsim.Runner) bool { return r.Name == own.Name }) {
		t.Errorf("the pool's own runner %s was touched: %d claims; %s", own.Name, len(cs), describe(l.get("orphans")))
	}
}
