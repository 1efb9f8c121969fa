package runnerpool_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// syncInterval is the suite's SyncInterval, which is also how old a
// shared runner listing may be.
const syncInterval = time.Second

// Eight pools on one credential and repository, reconciling every second
// and more, list that repository's runners at most once per interval
// between them: the listing is shared, not made per reconcile.
func TestPoolsShareOneRunnerListingPerInterval(t *testing.T) {
	l := newLab(t)
	const pools = 8
	repository, _ := l.repositoryPools("share", pools, nil)

	listPath := "/repos/" + repository + "/actions/runners"
	gh.ResetStats()
	start, reconciledBefore := time.Now(), reconciles(t)
	// Ten reconciles a pool (each requeues after the sync interval).
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		n := reconciles(t) - reconciledBefore
		return n >= 10*pools, fmt.Sprintf("%d reconciles", n)
	})
	elapsed := time.Since(start)
	reconciled := reconciles(t) - reconciledBefore
	listings := gets(listPath)
	// A listing starts only once the last one is an interval old: at most
	// one per interval, plus the one that may have started just before.
	most := int(elapsed/syncInterval) + 2
	t.Logf("%d pools: %d reconciles and %d listings of %s in %s", pools, reconciled, listings, repository, elapsed.Round(time.Millisecond))
	if listings > most {
		t.Fatalf("%d listings in %s (%d reconciles), want at most %d: one per %s shared by the pools",
			listings, elapsed.Round(time.Millisecond), reconciled, most, syncInterval)
	}
	if listings == 0 {
		t.Fatal("no listing at all: the pools stopped reading GitHub")
	}
}

// Eight pools on one credential and repository poll it for active jobs
// once per poll interval between them: one pool's poll lists the runs and
// their jobs, the others take that listing, and each records only the jobs
// routed to it. Every delivery is lost, so the poll is how each pool learns
// of its job.
func TestPoolsShareOneJobListingPerPoll(t *testing.T) {
	l := newLab(t)
	const pools = 8
	const poll = 10 * time.Second // the shortest the CRD allows; the test steps the fake clock by it
	repository, names := l.repositoryPools("jobshare", pools, func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.WebhookScaling = &hypervisorv1alpha1.WebhookScaling{PollInterval: &metav1.Duration{Duration: poll}}
	})

	// Each pool's first poll ran when it was made; the jobs are queued
	// after, so only the polls the step below makes due can find them.
	gh.DropNextDeliveries(pools)
	for _, n := range names {
		if _, err := gh.QueueJob(repository, []string{"self-hosted", n}); err != nil {
			t.Fatal(err)
		}
	}
	gh.ResetStats()
	start := time.Now()
	clk.Step(poll)
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		for _, n := range names {
			if states := l.jobStates(n); len(states) == 0 {
				return false, n + " has recorded no job; " + describe(l.get(n))
			}
		}
		return true, ""
	})
	elapsed := time.Since(start)
	runListings := gets("/repos/" + repository + "/actions/runs")
	// One job listing asks for the runs of each of the five unfinished
	// statuses (one page each here). A pool whose reconcile came more than
	// the poll interval after the shared listing started lists again.
	const perListing = 5
	most := perListing * (int(elapsed/poll) + 1)
	t.Logf("%d pools: %d run listings of %s in %s", pools, runListings, repository, elapsed.Round(time.Millisecond))
	if runListings > most {
		t.Fatalf("%d run listings in %s, want at most %d: one job listing shared by the %d pools (one each would be up to %d)",
			runListings, elapsed.Round(time.Millisecond), most, pools, pools*perListing)
	}
}

// repositoryPools adds a repository of the test's own to githubsim and
// makes n pools on it, named prefix-0 … prefix-(n-1), each also changed by
// mutate (when not nil); it waits until every one has reconciled to a Ready
// reason, and returns the repository (owner/name) and the pools' names.
func (l *lab) repositoryPools(prefix string, n int, mutate func(*hypervisorv1alpha1.RunnerPool)) (string, []string) {
	l.t.Helper()
	repository := "acme/" + l.ns
	if err := gh.AddRepository(repository); err != nil {
		l.t.Fatal(err)
	}
	owner, name, _ := strings.Cut(repository, "/")
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		l.pool(names[i], func(p *hypervisorv1alpha1.RunnerPool) {
			p.Spec.GitHub.Owner, p.Spec.GitHub.Repository = owner, name
			if mutate != nil {
				mutate(p)
			}
		})
	}
	eventually.That(l.t, time.Minute, func() (bool, string) {
		for _, name := range names {
			if p := l.get(name); readyReason(p) == "" {
				return false, describe(p)
			}
		}
		return true, ""
	})
	return repository, names
}

// gets counts the GET requests githubsim received for path since its
// stats were reset.
func gets(path string) int {
	n := 0
	for _, r := range gh.Requests() {
		// The path as sent: githubsim's URL is an Enterprise Server's, under /api/v3.
		if r.Method == "GET" && strings.HasSuffix(r.Path, path) {
			n++
		}
	}
	return n
}

// reconciles is how many RunnerPool reconciles the manager has run.
func reconciles(t *testing.T) int {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == "controller" && l.GetValue() == "runnerpool"
			}) {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// With its credential's budget spent down to the reserve, a deleted pool
// still deregisters every runner: the listing that finds them may spend the
// reserve, as the deletes may. An ordinary listing is refused meanwhile.
func TestDeletedPoolDeregistersOnTheReserve(t *testing.T) {
	const limit = 1000 // reserve: 5% → 50
	repository := "acme/reserve"
	sim := githubsim.New(githubsim.Options{Repositories: []string{repository}, RateLimit: limit})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	l := newLab(t)
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "reserve-pat", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"token": sim.PAT()},
	})
	two := int32(2)
	owner, name, _ := strings.Cut(repository, "/")
	p := l.pool("reserve", func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.Replicas = &two
		p.Spec.GitHub = hypervisorv1alpha1.GitHubRunnerScope{Owner: owner, Repository: name,
			CredentialsRef: meta.LocalObjectReference{Name: "reserve-pat"}, APIURL: sim.URL() + "/"}
	})
	label := runnerstate.PoolRunnerLabel(p)
	// The runners register (just in time) on this GitHub; the suite's
	// agents run theirs on the other, so they stay offline: registered.
	ours := func() int {
		n := 0
		for _, r := range sim.Runners() {
			if slices.ContainsFunc(r.Labels, func(l string) bool { return strings.EqualFold(l, label) }) {
				n++
			}
		}
		return n
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		return ours() == 2, fmt.Sprintf("%d registrations; %s", ours(), describe(l.get("reserve")))
	})

	// Spend the budget down to 45 of 1000 (under the reserve of 50); the
	// pool's next listing tells the operator's limiter.
	sim.SetRateUsed(limit - 45)
	budget := func() github.BudgetStatus {
		for _, b := range github.DefaultRateLimiter().Budgets() {
			if strings.HasPrefix(b.Key, sim.URL()) {
				return b
			}
		}
		return github.BudgetStatus{}
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		b := budget()
		return b.Limit == limit && b.Remaining <= 50, fmt.Sprintf("the limiter's budget: %+v", b)
	})
	lister, err := github.New(github.Config{BaseURL: sim.URL() + "/", Token: sim.PAT(), RateLimiter: github.DefaultRateLimiter()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lister.Close)
	listed := sim.Calls(githubsim.EndpointRepoListRunners)
	_, err = lister.ListRunners(rootCtx, github.Scope{Owner: owner, Repository: name})
	if !strings.Contains(fmt.Sprint(err), "RateLimited") {
		t.Fatalf("an ordinary listing with only the reserve left = %v, want RateLimited", err)
	}
	if n := sim.Calls(githubsim.EndpointRepoListRunners); n != listed {
		t.Fatalf("the refused listing reached GitHub (%d listings, had %d)", n, listed)
	}

	if err := l.c.Delete(rootCtx, l.get("reserve")); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		pool := &hypervisorv1alpha1.RunnerPool{}
		err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "reserve"}, pool)
		return apierrors.IsNotFound(err), fmt.Sprintf("pool: %s (%v); %d registrations; budget %+v", describe(pool), err, ours(), budget())
	})
	if n := ours(); n != 0 {
		t.Fatalf("the deleted pool left %d registrations", n)
	}
	for _, e := range l.events("reserve") {
		if strings.HasPrefix(e, "FinalizerDeadlineExceeded") {
			t.Fatalf("released at its deadline, not by its cleanup: %s", e)
		}
	}
}
