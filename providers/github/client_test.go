package github_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// The App's JWT is verified by the simulator, the installation token it
// mints is reused for every call until it nears expiry, and then replaced.
func TestAppAuthMintsAndCachesInstallationToken(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	sim := startSim(t, githubsim.Options{Clock: clk})
	cfg := appConfig(sim)
	cfg.Clock = clk
	c := newClient(t, cfg)
	if c.Kind() != github.AuthApp {
		t.Fatalf("Kind = %q", c.Kind())
	}
	ctx := ctxT(t)
	for range 3 {
		if _, err := c.ListRunners(ctx, repoScope); err != nil {
			t.Fatal(err)
		}
	}
	if n := sim.Calls(githubsim.EndpointCreateInstallationToken); n != 1 {
		t.Fatalf("installation tokens minted = %d, want 1 (cached)", n)
	}
	// 50 minutes on, the hour-long token has more than the refresh margin left.
	clk.SetTime(clk.Now().Add(50 * time.Minute))
	if _, err := c.ListRunners(ctx, repoScope); err != nil {
		t.Fatal(err)
	}
	if n := sim.Calls(githubsim.EndpointCreateInstallationToken); n != 1 {
		t.Fatalf("installation tokens minted = %d after 50m, want still 1", n)
	}
	// Within five minutes of expiry it is replaced before it is used.
	clk.SetTime(clk.Now().Add(6 * time.Minute))
	if _, err := c.ListRunners(ctx, repoScope); err != nil {
		t.Fatal(err)
	}
	if n := sim.Calls(githubsim.EndpointCreateInstallationToken); n != 2 {
		t.Fatalf("installation tokens minted = %d after 56m, want 2", n)
	}
	if n := sim.Calls(githubsim.EndpointRepoListRunners); n != 5 {
		t.Fatalf("list calls = %d, want 5", n)
	}
}

// A token GitHub stops accepting (revoked, expired early) is replaced
// transparently: the call is retried once with a new token.
func TestAppAuthRecoversFromRevokedToken(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	c := newClient(t, appConfig(sim))
	ctx := ctxT(t)
	if _, err := c.ListRunners(ctx, orgScope); err != nil {
		t.Fatal(err)
	}
	sim.RevokeInstallationTokens()
	if _, err := c.RegistrationToken(ctx, orgScope); err != nil {
		t.Fatalf("after revocation: %v", err)
	}
	if n := sim.Calls(githubsim.EndpointCreateInstallationToken); n != 2 {
		t.Fatalf("installation tokens minted = %d, want 2", n)
	}
	if n := sim.Calls(githubsim.EndpointOrgRegistrationToken); n != 2 {
		t.Fatalf("registration-token calls = %d, want 2 (one refused, one retried)", n)
	}
}

func TestPATAuth(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	c := newClient(t, patConfig(sim))
	if c.Kind() != github.AuthToken {
		t.Fatalf("Kind = %q", c.Kind())
	}
	ctx := ctxT(t)
	tok, err := c.RegistrationToken(ctx, repoScope)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Value == "" || time.Until(tok.ExpiresAt) < 55*time.Minute {
		t.Fatalf("token expires %v", tok.ExpiresAt)
	}
	if sim.Calls(githubsim.EndpointCreateInstallationToken) != 0 {
		t.Fatal("a PAT client minted an installation token")
	}
	noSecrets(t, fmt.Sprint(tok), tok.Value)
	noSecrets(t, fmt.Sprintf("%#v %+v", tok, tok), tok.Value)

	bad := patConfig(sim)
	bad.Token = "ghp_notavalidtokenatall000000000000000"
	_, err = newClient(t, bad).ListRunners(ctx, repoScope)
	wantPermanent(t, err, "AuthenticationFailed", "token")
	noSecrets(t, err.Error(), bad.Token)
}

// Registration tokens go to the repository when one is set, else to the
// organization, and register runners there.
func TestRepoAndOrgScopes(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	c := newClient(t, appConfig(sim))
	ctx := ctxT(t)

	repoTok, err := c.RegistrationToken(ctx, repoScope)
	if err != nil {
		t.Fatal(err)
	}
	orgTok, err := c.RegistrationToken(ctx, orgScope)
	if err != nil {
		t.Fatal(err)
	}
	if sim.Calls(githubsim.EndpointRepoRegistrationToken) != 1 || sim.Calls(githubsim.EndpointOrgRegistrationToken) != 1 {
		t.Fatalf("stats = %v", sim.Stats())
	}
	// A scope with both set is the repository's.
	both := github.Scope{Owner: "acme", Repository: "widgets", Organization: "acme"}
	if _, err := c.RegistrationToken(ctx, both); err != nil || sim.Calls(githubsim.EndpointRepoRegistrationToken) != 2 {
		t.Fatalf("repository must win over organization: %v, %v", err, sim.Stats())
	}
	if got, want := c.RunnerURL(repoScope), sim.URL()+"acme/widgets"; got != want {
		t.Errorf("RunnerURL = %q, want %q", got, want)
	}

	rr := register(t, sim, repoScope, repoTok, "repo-runner", false, "gpu")
	or := register(t, sim, orgScope, orgTok, "org-runner", true)
	if _, err := sim.RegisterRunner(githubsim.RegisterRequest{URL: sim.URL() + "acme", Token: repoTok.Value, Name: "x"}); err == nil {
		t.Fatal("a repository's registration token registered an organization runner")
	}

	repoRunners, err := c.ListRunners(ctx, repoScope)
	if err != nil || len(repoRunners) != 1 || repoRunners[0].ID != rr.ID {
		t.Fatalf("repo runners = %+v, %v", repoRunners, err)
	}
	got := repoRunners[0]
	if got.Name != "repo-runner" || got.Status != github.RunnerOffline || got.Online() || got.Busy ||
		!github.LabelsMatch(got.Labels, []string{"self-hosted", "linux", "x64", "GPU"}) {
		t.Fatalf("repo runner = %+v", got)
	}
	orgRunners, err := c.ListRunners(ctx, orgScope)
	if err != nil || len(orgRunners) != 1 || orgRunners[0].ID != or.ID {
		t.Fatalf("org runners = %+v, %v", orgRunners, err)
	}
	if r, err := c.GetRunner(ctx, orgScope, or.ID); err != nil || r.Name != "org-runner" {
		t.Fatalf("GetRunner = %+v, %v", r, err)
	}
	if _, err := c.GetRunner(ctx, repoScope, or.ID); !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("an org runner read through the repository: %v", err)
	}
	for _, sc := range []struct {
		scope github.Scope
		id    int64
	}{{repoScope, rr.ID}, {orgScope, or.ID}} {
		if err := c.DeleteRunner(ctx, sc.scope, sc.id); err != nil {
			t.Fatalf("DeleteRunner(%s): %v", sc.scope, err)
		}
		if err := c.DeleteRunner(ctx, sc.scope, sc.id); err != nil {
			t.Fatalf("deleting an absent runner must succeed: %v", err)
		}
		if _, err := c.GetRunner(ctx, sc.scope, sc.id); !errors.Is(err, providers.ErrNotFound) {
			t.Fatalf("GetRunner after delete = %v, want ErrNotFound", err)
		}
	}
	if left := sim.Runners(); len(left) != 0 {
		t.Fatalf("runners left registered: %+v", left)
	}

	// A repository the credentials cannot see is a permanent error naming it.
	_, err = c.ListRunners(ctx, github.Scope{Owner: "acme", Repository: "nope"})
	wantPermanent(t, err, "ScopeNotFound", "acme/nope", "installed")

	rm, err := c.RemoveToken(ctx, repoScope)
	if err != nil || rm.Value == "" {
		t.Fatalf("RemoveToken = %v", err)
	}
}

// A just-in-time runner is registered in a named group, runs one job,
// refuses deletion while busy, and is gone after.
func TestJITRunnerLifecycle(t *testing.T) {
	sim := startSim(t, githubsim.Options{JobDuration: 300 * time.Millisecond})
	groupID, err := sim.AddRunnerGroup("acme", "ci-fleet")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, appConfig(sim))
	ctx := ctxT(t)

	gid, err := c.RunnerGroupID(ctx, orgScope, "CI-Fleet")
	if err != nil || gid != groupID {
		t.Fatalf("RunnerGroupID = %d, %v; want %d", gid, err, groupID)
	}
	if gid, err := c.RunnerGroupID(ctx, orgScope, "ci-fleet"); err != nil || gid != groupID {
		t.Fatalf("cached RunnerGroupID = %d, %v", gid, err)
	}
	if n := sim.Calls(githubsim.EndpointOrgListRunnerGroups); n != 1 {
		t.Fatalf("runner-group listings = %d, want 1 (cached)", n)
	}
	if gid, err := c.RunnerGroupID(ctx, orgScope, ""); err != nil || gid != github.DefaultRunnerGroupID {
		t.Fatalf("default group = %d, %v", gid, err)
	}
	_, err = c.RunnerGroupID(ctx, orgScope, "missing")
	wantPermanent(t, err, "RunnerGroupNotFound", "missing")
	_, err = c.RunnerGroupID(ctx, repoScope, "ci-fleet")
	wantPermanent(t, err, "RunnerGroupNeedsOrganization")

	jit, err := c.GenerateJITConfig(ctx, orgScope, github.JITConfigRequest{
		Name: "hf-runner-1", RunnerGroupID: gid, Labels: []string{"self-hosted", "linux", "gpu"}, WorkFolder: "_w",
	})
	if err != nil {
		t.Fatal(err)
	}
	noSecrets(t, fmt.Sprintf("%v %+v %#v", jit, jit, jit), jit.Encoded)
	if jit.Runner.ID == 0 || jit.Runner.Name != "hf-runner-1" || jit.Runner.Online() {
		t.Fatalf("JIT runner = %+v", jit.Runner)
	}
	info, err := github.DecodeJITConfig(jit.Encoded)
	if err != nil {
		t.Fatal(err)
	}
	if info.RunnerID != jit.Runner.ID || info.RunnerName != "hf-runner-1" || info.PoolID != groupID || info.PoolName != "ci-fleet" ||
		info.WorkFolder != "_w" || !info.Ephemeral || info.GitHubURL != sim.URL()+"acme" {
		t.Fatalf("decoded JIT config = %+v", info)
	}
	_, err = c.GenerateJITConfig(ctx, orgScope, github.JITConfigRequest{Name: "hf-runner-1"})
	if !errors.Is(err, providers.ErrNameTaken) {
		t.Fatalf("a second runner of the same name: %v, want ErrNameTaken", err)
	}

	if _, err := sim.RunRunner(ctx, githubsim.RunRequest{JITConfig: jit.Encoded}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the runner online", func() bool {
		r, err := c.GetRunner(ctx, orgScope, jit.Runner.ID)
		return err == nil && r.Online() && !r.Busy
	})
	jobID, err := sim.QueueJob("acme/widgets", []string{"self-hosted", "GPU"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the runner busy", func() bool {
		r, err := c.GetRunner(ctx, orgScope, jit.Runner.ID)
		return err == nil && r.Busy
	})
	if err := c.DeleteRunner(ctx, orgScope, jit.Runner.ID); !errors.Is(err, github.ErrRunnerBusy) {
		t.Fatalf("deleting a busy runner = %v, want ErrRunnerBusy", err)
	}
	eventually.True(t, 5*time.Second, "the ephemeral runner gone after its job", func() bool {
		_, err := c.GetRunner(ctx, orgScope, jit.Runner.ID)
		return errors.Is(err, providers.ErrNotFound)
	})
	if j, _ := sim.Job(jobID); j.Status != githubsim.JobCompleted || j.Conclusion != "success" || j.RunnerName != "hf-runner-1" {
		t.Fatalf("job = %+v", j)
	}
	if err := c.DeleteRunner(ctx, orgScope, jit.Runner.ID); err != nil {
		t.Fatalf("deleting the gone runner = %v, want success", err)
	}
	if left := sim.Runners(); len(left) != 0 {
		t.Fatalf("runners left registered: %+v", left)
	}
}

// ListRunners follows every page, 100 runners per request.
func TestListRunnersPaginates(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	c := newClient(t, patConfig(sim))
	ctx := ctxT(t)
	tok, err := c.RegistrationToken(ctx, repoScope)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 234 {
		register(t, sim, repoScope, tok, fmt.Sprintf("r-%03d", i), true)
	}
	runners, err := c.ListRunners(ctx, repoScope)
	if err != nil {
		t.Fatal(err)
	}
	if len(runners) != 234 || runners[0].Name != "r-000" || runners[233].Name != "r-233" {
		t.Fatalf("listed %d runners", len(runners))
	}
	if n := sim.Calls(githubsim.EndpointRepoListRunners); n != 3 {
		t.Fatalf("list requests = %d, want 3", n)
	}
}

// Against an Enterprise Server, every request goes below /api/v3/, whether
// the configured URL names it or not.
func TestEnterpriseServerBaseURL(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	for _, base := range []string{sim.URL() + "api/v3/", strings.TrimSuffix(sim.URL(), "/")} {
		t.Run(base, func(t *testing.T) {
			sim.ResetStats()
			cfg := appConfig(sim)
			cfg.BaseURL = base
			c := newClient(t, cfg)
			if _, err := c.RegistrationToken(ctxT(t), repoScope); err != nil {
				t.Fatal(err)
			}
			reqs := sim.Requests()
			if len(reqs) != 2 {
				t.Fatalf("requests = %+v", reqs)
			}
			for _, r := range reqs {
				if !strings.HasPrefix(r.Path, "/api/v3/") {
					t.Errorf("request %s %s is not below /api/v3/", r.Method, r.Path)
				}
			}
			if got, want := c.RunnerURL(repoScope), sim.URL()+"acme/widgets"; got != want {
				t.Errorf("RunnerURL = %q, want %q", got, want)
			}
		})
	}
}

// A slow answer is cut off by the configured timeout and reported as a
// transient failure.
func TestRequestTimeout(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	cfg := patConfig(sim)
	cfg.Timeout = 200 * time.Millisecond
	c := newClient(t, cfg)
	if err := sim.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointRepoListRunners, Action: githubsim.FaultDelay, Delay: 3 * time.Second, Times: 1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.ListRunners(ctxT(t), repoScope)
	wantTransient(t, err, "GitHubUnreachable")
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the call took %s despite a 200ms timeout", took)
	}
	if _, err := c.ListRunners(ctxT(t), repoScope); err != nil {
		t.Fatalf("after the slow answer: %v", err)
	}
}

// The default timeout is 30 s.
func TestDefaultTimeout(t *testing.T) {
	if github.DefaultTimeout != 30*time.Second {
		t.Fatalf("DefaultTimeout = %s", github.DefaultTimeout)
	}
}

// A rotated App key: a client built from the new key works, the old key's
// JWT is refused, and the fingerprint tells the two configs apart.
func TestAppKeyRotation(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	ctx := ctxT(t)
	oldCfg := appConfig(sim)
	oldClient := newClient(t, oldCfg)
	if _, err := oldClient.ListRunners(ctx, repoScope); err != nil {
		t.Fatal(err)
	}
	newPEM, err := sim.RotateAppKey()
	if err != nil {
		t.Fatal(err)
	}
	newCfg := oldCfg
	newCfg.PrivateKeyPEM = newPEM
	if newCfg.Fingerprint() == oldCfg.Fingerprint() {
		t.Fatal("a rotated key must change the fingerprint, so the caller rebuilds the client")
	}
	if _, err := newClient(t, newCfg).ListRunners(ctx, repoScope); err != nil {
		t.Fatalf("the new key: %v", err)
	}

	// A client still holding the old key cannot mint a new token.
	_, err = newClient(t, oldCfg).ListRunners(ctx, repoScope)
	msg := wantPermanent(t, err, "AuthenticationFailed", "privateKey")
	noSecrets(t, err.Error(), string(oldCfg.PrivateKeyPEM), string(newPEM))
	noSecrets(t, msg, string(oldCfg.PrivateKeyPEM))
	// Tokens minted before the rotation stay valid until they expire, as on
	// GitHub; once revoked, the old client fails too.
	if _, err := oldClient.ListRunners(ctx, repoScope); err != nil {
		t.Fatalf("a token minted before the rotation: %v", err)
	}
	sim.RevokeInstallationTokens()
	_, err = oldClient.ListRunners(ctx, repoScope)
	wantPermanent(t, err, "AuthenticationFailed")
}

// Error statuses map to the contract's classes, and messages say what to fix.
func TestErrorClassification(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	app := newClient(t, appConfig(sim))
	pat := newClient(t, patConfig(sim))
	ctx := ctxT(t)
	denied := githubsim.Fault{Endpoint: githubsim.EndpointRepoRegistrationToken, Action: githubsim.FaultHTTPError, Status: 403,
		Message: "Resource not accessible by integration", Times: 1}
	orgDenied := denied
	orgDenied.Endpoint = githubsim.EndpointOrgRegistrationToken

	cases := []struct {
		name   string
		client *github.Client
		scope  github.Scope
		fault  githubsim.Fault
		check  func(t *testing.T, err error)
	}{
		{"repo permission (App)", app, repoScope, denied, func(t *testing.T, err error) {
			wantPermanent(t, err, "PermissionDenied", `"Administration: Read and write"`, "acme/widgets")
		}},
		{"org permission (App)", app, orgScope, orgDenied, func(t *testing.T, err error) {
			wantPermanent(t, err, "PermissionDenied", `"Self-hosted runners: Read and write"`, "acme")
		}},
		{"repo permission (token)", pat, repoScope, denied, func(t *testing.T, err error) {
			wantPermanent(t, err, "PermissionDenied", `"repo" scope`, "Administration")
		}},
		{"org permission (token)", pat, orgScope, orgDenied, func(t *testing.T, err error) {
			wantPermanent(t, err, "PermissionDenied", `"admin:org"`, "Self-hosted runners")
		}},
		{"500", app, repoScope, githubsim.Fault{Endpoint: githubsim.EndpointRepoRegistrationToken, Action: githubsim.FaultHTTPError, Status: 500, Times: 1},
			func(t *testing.T, err error) { wantTransient(t, err, "GitHubUnavailable") }},
		{"503 with Retry-After", app, repoScope, githubsim.Fault{Endpoint: githubsim.EndpointRepoRegistrationToken, Action: githubsim.FaultHTTPError, Status: 503, RetryAfter: 7 * time.Second, Times: 1},
			func(t *testing.T, err error) {
				if after := wantTransient(t, err, "GitHubUnavailable"); after != 7*time.Second {
					t.Errorf("After = %s, want 7s", after)
				}
			}},
		{"hang, cut by the context", app, repoScope, githubsim.Fault{Endpoint: githubsim.EndpointRepoRegistrationToken, Action: githubsim.FaultHang, Times: 1},
			func(t *testing.T, err error) { wantTransient(t, err, "GitHubUnreachable") }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := sim.InjectFault(tc.fault); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := tc.client.RegistrationToken(cctx, tc.scope)
			tc.check(t, err)
			sim.ClearFaults()
			if _, err := tc.client.RegistrationToken(ctx, tc.scope); err != nil {
				t.Fatalf("after the fault cleared: %v", err)
			}
		})
	}
}

// New refuses incomplete or malformed credentials without a request and
// without repeating them.
func TestNewValidates(t *testing.T) {
	cases := []struct {
		name   string
		cfg    github.Config
		reason string
	}{
		{"nothing", github.Config{}, "CredentialsIncomplete"},
		{"app without key", github.Config{AppID: 1, InstallationID: 2}, "CredentialsIncomplete"},
		{"app without installation", github.Config{AppID: 1, PrivateKeyPEM: []byte("x")}, "CredentialsIncomplete"},
		{"garbage key", github.Config{AppID: 1, InstallationID: 2, PrivateKeyPEM: []byte("-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0\n-----END RSA PRIVATE KEY-----\n")}, "InvalidPrivateKey"},
		{"bad URL", github.Config{Token: "t", BaseURL: "ghe.example.com"}, "InvalidAPIURL"},
		{"token with a newline inside", github.Config{Token: "ghp_a\nb"}, "InvalidCredentials"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := github.New(tc.cfg)
			wantPermanent(t, err, tc.reason)
			noSecrets(t, err.Error(), "c2VjcmV0", "ghp_a")
		})
	}
	// Scope errors are permanent and need no request either.
	c, err := github.New(github.Config{Token: "t", BaseURL: "http://127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListRunners(context.Background(), github.Scope{Repository: "widgets"})
	wantPermanent(t, err, "InvalidScope")
}
