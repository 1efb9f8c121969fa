package github_test

import (
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// A 429 or a 403 with Retry-After stops every call for exactly that long:
// the calls fail at once as RateLimited, nothing reaches GitHub, and the
// first call after the wait goes out.
func TestRetryAfterStopsCallsUntilItPasses(t *testing.T) {
	for _, status := range []int{429, 403} {
		t.Run(map[int]string{429: "429", 403: "403"}[status], func(t *testing.T) {
			sim := startSim(t, githubsim.Options{})
			clk := clocktesting.NewFakePassiveClock(time.Now())
			cfg := patConfig(sim)
			cfg.RateLimiter = github.NewRateLimiter(github.RateLimiterOptions{Clock: clk})
			c := newClient(t, cfg)
			ctx := ctxT(t)
			if err := sim.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointRepoListRunners, Action: githubsim.FaultHTTPError,
				Status: status, Message: "API rate limit exceeded", RetryAfter: 30 * time.Second, Times: 1}); err != nil {
				t.Fatal(err)
			}
			_, err := c.ListRunners(ctx, repoScope)
			if after := wantTransient(t, err, github.ReasonRateLimited); after != 30*time.Second {
				t.Fatalf("After = %s, want 30s", after)
			}
			sent := len(sim.Requests())

			clk.SetTime(clk.Now().Add(20 * time.Second))
			_, err = c.RegistrationToken(ctx, repoScope) // another endpoint: the wait covers them all
			after := wantTransient(t, err, github.ReasonRateLimited)
			if after != 10*time.Second {
				t.Fatalf("After = %s 20s into a 30s wait, want 10s", after)
			}
			var rl *github.RateLimitedError
			if !errors.As(err, &rl) {
				t.Fatalf("a call refused locally must say so: %v", err)
			}
			if err := c.DeleteRunner(ctx, repoScope, 1); err == nil {
				t.Fatal("a Retry-After must hold back deletes too")
			}
			if n := len(sim.Requests()); n != sent {
				t.Fatalf("%d requests reached GitHub during the wait", n-sent)
			}

			clk.SetTime(clk.Now().Add(10 * time.Second))
			if _, err := c.ListRunners(ctx, repoScope); err != nil {
				t.Fatalf("after the wait: %v", err)
			}
		})
	}
}

// A secondary rate limit without Retry-After stops calls for a minute.
func TestSecondaryRateLimitWithoutRetryAfter(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	clk := clocktesting.NewFakePassiveClock(time.Now())
	cfg := appConfig(sim)
	cfg.RateLimiter = github.NewRateLimiter(github.RateLimiterOptions{Clock: clk})
	c := newClient(t, cfg)
	ctx := ctxT(t)
	if err := sim.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointOrgGenerateJITConfig, Action: githubsim.FaultSecondaryRateLimit, Times: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := c.GenerateJITConfig(ctx, orgScope, github.JITConfigRequest{Name: "r1"})
	if after := wantTransient(t, err, github.ReasonRateLimited); after != time.Minute {
		t.Fatalf("After = %s, want 1m", after)
	}
	before := len(sim.Requests())
	clk.SetTime(clk.Now().Add(59 * time.Second))
	_, err = c.ListRunners(ctx, orgScope)
	if after := wantTransient(t, err, github.ReasonRateLimited); after != time.Second {
		t.Fatalf("After = %s 59s into the wait, want 1s", after)
	}
	if n := len(sim.Requests()); n != before {
		t.Fatal("a call went out during a secondary rate limit")
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if _, err := c.GenerateJITConfig(ctx, orgScope, github.JITConfigRequest{Name: "r1"}); err != nil {
		t.Fatalf("after the wait: %v", err)
	}
}

// A secondary rate limit with Retry-After stops calls for as long as it
// says. go-github keeps its own memory of it on the real clock, so this test
// runs on the real clock with a one-second wait.
func TestSecondaryRateLimitWithRetryAfter(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	c := newClient(t, appConfig(sim))
	ctx := ctxT(t)
	if err := sim.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointOrgGenerateJITConfig, Action: githubsim.FaultSecondaryRateLimit,
		RetryAfter: time.Second, Times: 1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.GenerateJITConfig(ctx, orgScope, github.JITConfigRequest{Name: "r1"})
	if after := wantTransient(t, err, github.ReasonRateLimited); after != time.Second {
		t.Fatalf("After = %s, want 1s", after)
	}
	refusedAt := len(sim.Requests())
	var succeeded time.Time
	eventually.True(t, 5*time.Second, "a call to go out after the wait", func() bool {
		_, err := c.ListRunners(ctx, orgScope)
		if err == nil {
			succeeded = time.Now()
			return true
		}
		if after := wantTransient(t, err, github.ReasonRateLimited); after <= 0 || after > time.Second {
			t.Fatalf("After = %s during a 1s wait", after)
		}
		if n := len(sim.Requests()); n != refusedAt {
			t.Fatalf("%d calls went out during the wait", n-refusedAt)
		}
		return false
	})
	if waited := succeeded.Sub(start); waited < 900*time.Millisecond {
		t.Fatalf("a call went out %s after a 1s Retry-After", waited)
	}
}

// Two clients with the same credentials share one budget through one
// RateLimiter: together they stop before GitHub refuses anything, keeping the
// reserve for deletes, which still go out.
func TestBudgetSharedByTwoClients(t *testing.T) {
	const limit = 40 // reserve: 5% → 2
	sim := startSim(t, githubsim.Options{RateLimit: limit})
	shared := github.NewRateLimiter(github.RateLimiterOptions{})
	cfgA, cfgB := patConfig(sim), patConfig(sim)
	cfgA.RateLimiter, cfgB.RateLimiter = shared, shared
	cfgB.Timeout = 7 * time.Second // another client, same credentials
	a, b := newClient(t, cfgA), newClient(t, cfgB)
	if a.Fingerprint() == b.Fingerprint() {
		t.Fatal("different timeouts must give different fingerprints")
	}
	ctx := ctxT(t)

	sent, refused := 0, 0
	for i := range 60 {
		c := a
		if i%2 == 1 {
			c = b
		}
		_, err := c.ListRunners(ctx, repoScope)
		switch {
		case err == nil:
			sent++
		case errors.As(err, new(*github.RateLimitedError)):
			refused++
			if after := wantTransient(t, err, github.ReasonRateLimited); after <= 50*time.Minute {
				t.Fatalf("After = %s, want until the window resets (~1h)", after)
			}
		default:
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if sent != limit-2 || refused != 60-sent {
		t.Fatalf("sent %d, refused %d; want %d sent, the rest refused locally", sent, refused, limit-2)
	}
	if n := sim.Calls(githubsim.EndpointRepoListRunners); n != sent {
		t.Fatalf("GitHub saw %d list calls, want %d", n, sent)
	}
	for _, r := range sim.Requests() {
		if r.Status == 403 {
			t.Fatalf("GitHub refused a request: %+v", r)
		}
	}
	budgets := shared.Budgets()
	if len(budgets) != 1 || budgets[0].Limit != limit {
		t.Fatalf("budgets = %+v, want one shared budget", budgets)
	}

	// The reserve still carries deletes.
	for range 2 {
		if err := b.DeleteRunner(ctx, repoScope, 12345); err != nil {
			t.Fatalf("a delete with the reserve left: %v", err)
		}
	}
	if err := a.DeleteRunner(ctx, repoScope, 12345); !errors.As(err, new(*github.RateLimitedError)) {
		t.Fatalf("a delete with the budget spent = %v, want refused locally", err)
	}

	// A client outside the shared limiter learns the hard way: GitHub's 403.
	lone := newClient(t, patConfig(sim))
	_, err := lone.ListRunners(ctx, repoScope)
	after := wantTransient(t, err, github.ReasonRateLimited)
	if after <= 50*time.Minute || errors.As(err, new(*github.RateLimitedError)) {
		t.Fatalf("GitHub's own refusal = %v (after %s)", err, after)
	}
	before := len(sim.Requests())
	_, err = lone.ListRunners(ctx, repoScope)
	wantTransient(t, err, github.ReasonRateLimited)
	if len(sim.Requests()) != before {
		t.Fatal("after GitHub's 403 the next call must be held back locally")
	}
}

// App and installation budgets are separate, as on GitHub: a spent
// installation budget does not stop minting the token deletes need.
func TestBudgetsPerCredential(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	limiter := github.NewRateLimiter(github.RateLimiterOptions{})
	app, pat := appConfig(sim), patConfig(sim)
	app.RateLimiter, pat.RateLimiter = limiter, limiter
	ctx := ctxT(t)
	if _, err := newClient(t, app).ListRunners(ctx, repoScope); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, pat).ListRunners(ctx, repoScope); err != nil {
		t.Fatal(err)
	}
	if got := len(limiter.Budgets()); got != 3 {
		t.Fatalf("budgets = %+v; want installation, App and token", limiter.Budgets())
	}
}

// The reads that precede a deregistration may spend the reserve when their
// context says so (ForDeregistration); the same reads without it may not.
func TestDeregistrationReadsUseTheReserve(t *testing.T) {
	const limit = 40 // reserve: 5% → 2
	sim := startSim(t, githubsim.Options{RateLimit: limit})
	sim.SetRateUsed(limit - 3)
	cfg := patConfig(sim)
	cfg.RateLimiter = github.NewRateLimiter(github.RateLimiterOptions{})
	c := newClient(t, cfg)
	ctx := ctxT(t)
	if _, err := c.ListRunners(ctx, repoScope); err != nil {
		t.Fatalf("the call that learns the budget: %v", err)
	}
	// Only the reserve (2) is left.
	if _, err := c.ListRunners(ctx, repoScope); !errors.As(err, new(*github.RateLimitedError)) {
		t.Fatalf("an ordinary listing into the reserve = %v, want refused locally", err)
	}
	if _, err := c.GetRunner(ctx, repoScope, 1); !errors.As(err, new(*github.RateLimitedError)) {
		t.Fatalf("an ordinary read into the reserve = %v, want refused locally", err)
	}
	dereg := github.ForDeregistration(ctx)
	if _, err := c.ListRunners(dereg, repoScope); err != nil {
		t.Fatalf("the listing before a deregistration: %v", err)
	}
	if _, err := c.GetRunner(dereg, repoScope, 1); errors.As(err, new(*github.RateLimitedError)) {
		t.Fatalf("the read before a deregistration was refused: %v", err)
	}
	if got := sim.Calls(githubsim.EndpointRepoListRunners) + sim.Calls(githubsim.EndpointRepoGetRunner); got != 3 {
		t.Fatalf("GitHub saw %d reads, want 3 (1 ordinary, 2 from the reserve)", got)
	}
	_, err := c.ListRunners(dereg, repoScope)
	wantTransient(t, err, github.ReasonRateLimited)
	if got := sim.Calls(githubsim.EndpointRepoListRunners); got != 2 {
		t.Fatalf("with the reserve spent too, a listing reached GitHub (%d listings)", got)
	}
}
