package githubsim_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	gogithub "github.com/google/go-github/v60/github"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

// ---------------------------------------------------------------------------
// helpers

var (
	keyOnce sync.Once
	appKey  *rsa.PrivateKey
)

func testKey() *rsa.PrivateKey {
	keyOnce.Do(func() {
		var err error
		if appKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(err)
		}
	})
	return appKey
}

func startSim(t *testing.T, opts githubsim.Options) *githubsim.Server {
	t.Helper()
	if opts.AppKey == nil {
		opts.AppKey = testKey()
	}
	opts.ErrorLog = log.New(io.Discard, "", 0)
	s := githubsim.New(opts)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// patClient is go-github against the simulator's root, as api.github.com.
func patClient(t *testing.T, s *githubsim.Server) *gogithub.Client {
	t.Helper()
	c := gogithub.NewClient(&http.Client{Timeout: 10 * time.Second}).WithAuthToken(s.PAT())
	c.BaseURL = mustURL(t, s.URL())
	return c
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func statusOf(err error) int {
	var sc interface{ StatusCode() int }
	if errors.As(err, &sc) {
		return sc.StatusCode()
	}
	return 0
}

func wantStatus(t *testing.T, err error, status int) {
	t.Helper()
	var er *gogithub.ErrorResponse
	got := statusOf(err)
	if errors.As(err, &er) {
		got = er.Response.StatusCode
	}
	if got != status {
		t.Fatalf("error = %v; want status %d", err, status)
	}
}

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out
}

// hookReceiver records webhook deliveries after checking their signature
// with go-github's own validator.
type hookReceiver struct {
	t      *testing.T
	secret string
	mu     sync.Mutex
	got    []received
	srv    *httptest.Server
}

type received struct {
	header http.Header
	event  any
	body   []byte
}

func newHookReceiver(t *testing.T, secret string) *hookReceiver {
	h := &hookReceiver{t: t, secret: secret}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := gogithub.ValidatePayload(r, []byte(secret))
		if err != nil {
			h.t.Errorf("delivery failed validation: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		ev, err := gogithub.ParseWebHook(gogithub.WebHookType(r), body)
		if err != nil {
			h.t.Errorf("delivery does not parse: %v", err)
		}
		h.mu.Lock()
		h.got = append(h.got, received{header: r.Header.Clone(), event: ev, body: body})
		h.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookReceiver) all() []received {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]received(nil), h.got...)
}

// ---------------------------------------------------------------------------
// tests

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// A runner registered over HTTP as config.sh does comes online when run,
// takes a matching job, is busy, finishes and disappears; each step of the
// job is a signed workflow_job delivery that go-github validates and parses.
func TestRunnerLifecycleAndWebhooks(t *testing.T) {
	hook := newHookReceiver(t, "s3cret")
	s := startSim(t, githubsim.Options{WebhookURL: hook.srv.URL, WebhookSecret: "s3cret", JobDuration: 200 * time.Millisecond})
	gh := patClient(t, s)
	ctx := ctxT(t)

	tok, _, err := gh.Actions.CreateOrganizationRegistrationToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(tok.GetExpiresAt().Time); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("registration token expires in %s, want 1h", d)
	}
	status, body := postJSON(t, s.URL()+"_sim/runners/register", githubsim.RegisterRequest{
		URL: s.URL() + "acme", Token: tok.GetToken(), Name: "vm-1", Labels: []string{"gpu"}, Ephemeral: true,
	})
	if status != http.StatusCreated {
		t.Fatalf("register = %d %s", status, body)
	}
	var reg githubsim.Runner
	if err := json.Unmarshal(body, &reg); err != nil {
		t.Fatal(err)
	}
	r, _, err := gh.Actions.GetOrganizationRunner(ctx, "acme", reg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus() != "offline" || r.GetBusy() || len(r.Labels) != 4 || r.Labels[0].GetName() != "self-hosted" || r.Labels[0].GetType() != "read-only" ||
		r.Labels[3].GetName() != "gpu" || r.Labels[3].GetType() != "custom" {
		t.Fatalf("registered runner = %s", gogithub.Stringify(r))
	}

	// run.sh with wait: returns when the ephemeral runner is done.
	type ran struct {
		status int
		body   []byte
	}
	done := make(chan ran, 1)
	go func() {
		b, _ := json.Marshal(githubsim.RunRequest{ID: reg.ID, Wait: true})
		res, err := http.Post(s.URL()+"_sim/runners/run", "application/json", bytes.NewReader(b))
		if err != nil {
			done <- ran{}
			return
		}
		defer func() { _ = res.Body.Close() }()
		out, _ := io.ReadAll(res.Body)
		done <- ran{res.StatusCode, out}
	}()
	eventually.True(t, 5*time.Second, "the runner online", func() bool {
		r, _, err := gh.Actions.GetOrganizationRunner(ctx, "acme", reg.ID)
		return err == nil && r.GetStatus() == "online" && !r.GetBusy()
	})
	if _, err := s.QueueJob("acme/widgets", []string{"self-hosted", "windows"}); err != nil {
		t.Fatal(err)
	}
	jobID, err := s.QueueJob("acme/widgets", []string{"self-hosted", "Linux", "GPU"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the runner busy", func() bool {
		r, _, err := gh.Actions.GetOrganizationRunner(ctx, "acme", reg.ID)
		return err == nil && r.GetBusy()
	})
	_, err = gh.Actions.RemoveOrganizationRunner(ctx, "acme", reg.ID)
	wantStatus(t, err, http.StatusUnprocessableEntity)

	var final ran
	select {
	case final = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run.sh did not return after the ephemeral job")
	}
	var after githubsim.Runner
	if final.status != http.StatusOK || json.Unmarshal(final.body, &after) != nil || !after.Removed || after.Running {
		t.Fatalf("run answered %d %s", final.status, final.body)
	}
	_, _, err = gh.Actions.GetOrganizationRunner(ctx, "acme", reg.ID)
	wantStatus(t, err, http.StatusNotFound)
	if left := s.Runners(); len(left) != 0 {
		t.Fatalf("runners left: %+v", left)
	}
	jobs := s.Jobs()
	if len(jobs) != 2 || jobs[0].Status != githubsim.JobQueued || jobs[1].ID != jobID || jobs[1].Status != githubsim.JobCompleted || jobs[1].RunnerName != "vm-1" {
		t.Fatalf("jobs = %+v", jobs)
	}

	// queued (the Windows job), queued, in_progress, completed
	eventually.True(t, 5*time.Second, "four deliveries", func() bool { return len(hook.all()) == 4 })
	got := hook.all()
	var actions []string
	for _, d := range got {
		if d.header.Get("X-GitHub-Event") != "workflow_job" || !uuidRE.MatchString(d.header.Get("X-GitHub-Delivery")) ||
			d.header.Get("X-GitHub-Hook-ID") == "" || !strings.HasPrefix(d.header.Get("User-Agent"), "GitHub-Hookshot/") {
			t.Fatalf("headers = %v", d.header)
		}
		if want := githubsim.Sign("s3cret", d.body); d.header.Get("X-Hub-Signature-256") != want {
			t.Fatalf("signature %q, want %q", d.header.Get("X-Hub-Signature-256"), want)
		}
		ev := d.event.(*gogithub.WorkflowJobEvent)
		actions = append(actions, ev.GetAction())
		if ev.GetRepo().GetFullName() != "acme/widgets" || ev.GetRepo().GetName() != "widgets" || ev.GetRepo().GetOwner().GetLogin() != "acme" ||
			ev.GetOrg().GetLogin() != "acme" || ev.GetInstallation().GetID() != s.InstallationID() {
			t.Fatalf("payload = %s", d.body)
		}
	}
	if strings.Join(actions, ",") != "queued,queued,in_progress,completed" {
		t.Fatalf("actions = %v", actions)
	}
	inProgress := got[2].event.(*gogithub.WorkflowJobEvent).GetWorkflowJob()
	if inProgress.GetID() != jobID || inProgress.GetRunID() == 0 || inProgress.GetStatus() != "in_progress" || inProgress.GetRunnerName() != "vm-1" ||
		inProgress.GetRunnerID() != reg.ID || inProgress.GetRunnerGroupName() != "Default" || strings.Join(inProgress.Labels, ",") != "self-hosted,Linux,GPU" {
		t.Fatalf("in_progress job = %s", got[2].body)
	}
	completed := got[3].event.(*gogithub.WorkflowJobEvent).GetWorkflowJob()
	if completed.GetStatus() != "completed" || completed.GetConclusion() != "success" || completed.CompletedAt == nil {
		t.Fatalf("completed job = %s", got[3].body)
	}
	queued := got[1].event.(*gogithub.WorkflowJobEvent).GetWorkflowJob()
	if queued.RunnerName != nil || queued.Conclusion != nil {
		t.Fatalf("a queued job names a runner or a conclusion: %s", got[1].body)
	}

	// A redelivery carries the same GUID and body.
	deliveries := s.Deliveries()
	if len(deliveries) != 4 || !deliveries[0].Attempted || deliveries[0].StatusCode != http.StatusAccepted {
		t.Fatalf("deliveries = %+v", deliveries)
	}
	status, body = postJSON(t, fmt.Sprintf("%s_sim/deliveries/%d/redeliver", s.URL(), deliveries[2].ID), struct{}{})
	if status != http.StatusAccepted {
		t.Fatalf("redeliver = %d %s", status, body)
	}
	eventually.True(t, 5*time.Second, "the redelivery", func() bool { return len(hook.all()) == 5 })
	re := hook.all()[4]
	if re.header.Get("X-GitHub-Delivery") != got[2].header.Get("X-GitHub-Delivery") || !bytes.Equal(re.body, got[2].body) {
		t.Fatal("a redelivery must repeat the GUID and the payload")
	}
	if d := s.Deliveries(); !d[4].Redelivery || d[4].GUID != d[2].GUID {
		t.Fatalf("deliveries = %+v", d)
	}
}

// A runner registered on a repository takes only that repository's jobs; an
// organization runner takes jobs of the organization's repositories.
func TestJobMatching(t *testing.T) {
	s := startSim(t, githubsim.Options{Repositories: []string{"acme/widgets", "acme/gadgets", "alice/dotfiles"}, Organizations: []string{"acme"}, JobDuration: time.Hour})
	gh := patClient(t, s)
	ctx := ctxT(t)
	run := func(scope string, name string, labels ...string) int64 {
		t.Helper()
		var tok *gogithub.RegistrationToken
		var err error
		if owner, repo, ok := strings.Cut(scope, "/"); ok {
			tok, _, err = gh.Actions.CreateRegistrationToken(ctx, owner, repo)
		} else {
			tok, _, err = gh.Actions.CreateOrganizationRegistrationToken(ctx, scope)
		}
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.RegisterRunner(githubsim.RegisterRequest{URL: "https://github.com/" + scope, Token: tok.GetToken(), Name: name, Labels: labels, Ephemeral: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunRunner(ctx, githubsim.RunRequest{ID: r.ID}); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	gadgets := run("acme/gadgets", "gadgets-runner")
	org := run("acme", "org-runner", "big")
	user := run("alice/dotfiles", "alice-runner")

	j1, _ := s.QueueJob("acme/widgets", []string{"self-hosted"})          // not gadgets-runner's repository: org-runner
	j2, _ := s.QueueJob("acme/widgets", []string{"self-hosted", "big"})   // only org-runner has "big", and it is busy
	j3, _ := s.QueueJob("alice/dotfiles", []string{"self-hosted", "x64"}) // a user's repository
	jobRunner := func(id int64) int64 { j, _ := s.Job(id); return j.RunnerID }
	eventually.True(t, 5*time.Second, "jobs taken", func() bool { return jobRunner(j1) == org && jobRunner(j3) == user })
	if jobRunner(j2) != 0 {
		t.Fatalf("job 2 taken by %d", jobRunner(j2))
	}
	if r, _ := s.Runner(gadgets); r.Busy {
		t.Fatal("a repository runner took another repository's job")
	}
	// Stopping a busy runner (its machine powered off) fails its job and
	// leaves it registered, offline; the next job waits.
	if err := s.StopRunner(org); err != nil {
		t.Fatal(err)
	}
	if j, _ := s.Job(j1); j.Status != githubsim.JobCompleted || j.Conclusion != "failure" {
		t.Fatalf("the stopped runner's job = %+v", j)
	}
	r, ok := s.Runner(org)
	if !ok || r.Status != "offline" || r.Busy || r.Running {
		t.Fatalf("the stopped runner = %+v, %v", r, ok)
	}
	if jobRunner(j2) != 0 {
		t.Fatal("an offline runner took a job")
	}
}

// The App's JWT is checked as GitHub checks it.
func TestAppJWTValidation(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	s := startSim(t, githubsim.Options{Clock: clk})
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	sign := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := jwt.MapClaims{"iss": strconv.FormatInt(s.AppID(), 10), "iat": now.Add(-time.Minute).Unix(), "exp": now.Add(9 * time.Minute).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	cases := []struct {
		name   string
		token  string
		status int
		msg    string
	}{
		{"valid", sign(jwt.SigningMethodRS256, testKey(), good), 201, ""},
		{"numeric iss", sign(jwt.SigningMethodRS256, testKey(), with("iss", s.AppID())), 201, ""},
		{"another key", sign(jwt.SigningMethodRS256, other, good), 401, "could not be decoded"},
		{"HS256", sign(jwt.SigningMethodHS256, []byte("secret"), good), 401, "could not be decoded"},
		{"wrong iss", sign(jwt.SigningMethodRS256, testKey(), with("iss", "999")), 401, "Issuer"},
		{"expired", sign(jwt.SigningMethodRS256, testKey(), with("exp", now.Add(-time.Second).Unix())), 401, "Expiration time"},
		{"no exp", sign(jwt.SigningMethodRS256, testKey(), with("exp", nil)), 401, "Expiration time"},
		{"exp too far", sign(jwt.SigningMethodRS256, testKey(), with("exp", now.Add(30*time.Minute).Unix())), 401, "too far in the future"},
		{"iat in the future", sign(jwt.SigningMethodRS256, testKey(), with("iat", now.Add(5*time.Minute).Unix())), 401, "Issued at"},
		{"no iat", sign(jwt.SigningMethodRS256, testKey(), with("iat", nil)), 401, "Issued at"},
		{"garbage", "not.a.jwt", 401, "could not be decoded"},
		{"none", "", 401, "could not be decoded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%sapp/installations/%d/access_tokens", s.URL(), s.InstallationID()), nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = res.Body.Close() }()
			var body map[string]any
			_ = json.NewDecoder(res.Body).Decode(&body)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d %v, want %d", res.StatusCode, body, tc.status)
			}
			if msg, _ := body["message"].(string); !strings.Contains(msg, tc.msg) {
				t.Fatalf("message %q does not say %q", msg, tc.msg)
			}
			if tc.status == 201 {
				tok, _ := body["token"].(string)
				if !strings.HasPrefix(tok, "ghs_") || body["expires_at"] == nil {
					t.Fatalf("answer = %v", body)
				}
			}
		})
	}
	// Unknown installation: 404.
	c := gogithub.NewClient(&http.Client{Transport: bearerTransport(sign(jwt.SigningMethodRS256, testKey(), good))})
	c.BaseURL = mustURL(t, s.URL())
	_, _, err = c.Apps.CreateInstallationToken(ctxT(t), 12345, nil)
	wantStatus(t, err, http.StatusNotFound)
}

// Every API call needs a valid installation token or PAT; tokens expire.
func TestAuthenticationOnEveryCall(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	s := startSim(t, githubsim.Options{Clock: clk, InstallationTokenTTL: 10 * time.Minute})
	ctx := ctxT(t)
	anon := gogithub.NewClient(nil)
	anon.BaseURL = mustURL(t, s.URL())
	_, _, err := anon.Actions.ListRunners(ctx, "acme", "widgets", nil)
	wantStatus(t, err, http.StatusUnauthorized)
	var er *gogithub.ErrorResponse
	if errors.As(err, &er) && er.Message != "Requires authentication" {
		t.Fatalf("message %q", er.Message)
	}
	bad := anon.WithAuthToken("ghp_wrong")
	_, _, err = bad.Actions.ListRunners(ctx, "acme", "widgets", nil)
	wantStatus(t, err, http.StatusUnauthorized)

	// An installation token works until it expires.
	now := clk.Now()
	jwtTok, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": s.AppID(), "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}).SignedString(testKey())
	app := gogithub.NewClient(&http.Client{Transport: bearerTransport(jwtTok)})
	app.BaseURL = mustURL(t, s.URL())
	it, _, err := app.Apps.CreateInstallationToken(ctx, s.InstallationID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := anon.WithAuthToken(it.GetToken())
	if _, _, err := inst.Actions.ListRunners(ctx, "acme", "widgets", nil); err != nil {
		t.Fatal(err)
	}
	if s.InstallationTokens() != 1 {
		t.Fatalf("valid installation tokens = %d", s.InstallationTokens())
	}
	clk.SetTime(now.Add(11 * time.Minute))
	_, _, err = inst.Actions.ListRunners(ctx, "acme", "widgets", nil)
	wantStatus(t, err, http.StatusUnauthorized)
	// A rotated App key refuses JWTs signed with the old one.
	if _, err := s.RotateAppKey(); err != nil {
		t.Fatal(err)
	}
	fresh, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": s.AppID(), "iat": clk.Now().Unix(), "exp": clk.Now().Add(5 * time.Minute).Unix()}).SignedString(testKey())
	app = gogithub.NewClient(&http.Client{Transport: bearerTransport(fresh)})
	app.BaseURL = mustURL(t, s.URL())
	_, _, err = app.Apps.CreateInstallationToken(ctx, s.InstallationID(), nil)
	wantStatus(t, err, http.StatusUnauthorized)
}

// The budget decrements per call, shows in the headers, and a spent budget
// is GitHub's 403 with remaining 0, which go-github reports as a
// RateLimitError; the next window starts afresh.
func TestRateLimitBudget(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	s := startSim(t, githubsim.Options{Clock: clk, RateLimit: 3})
	gh := patClient(t, s)
	ctx := ctxT(t)
	for i := range 3 {
		_, resp, err := gh.Actions.ListRunners(ctx, "acme", "widgets", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Rate.Limit != 3 || resp.Rate.Remaining != 2-i || resp.Rate.Reset.Before(clk.Now().Add(59*time.Minute)) {
			t.Fatalf("rate = %+v", resp.Rate)
		}
		if resp.Header.Get("X-RateLimit-Resource") != "core" || resp.Header.Get("X-RateLimit-Used") != strconv.Itoa(i+1) {
			t.Fatalf("headers = %v", resp.Header)
		}
	}
	// A new client, so go-github's own memory does not answer for GitHub.
	_, _, err := patClient(t, s).Actions.ListRunners(ctx, "acme", "widgets", nil)
	var rl *gogithub.RateLimitError
	if !errors.As(err, &rl) || rl.Rate.Remaining != 0 || !strings.Contains(rl.Message, "API rate limit exceeded") {
		t.Fatalf("over budget = %v", err)
	}
	if n := s.Calls(githubsim.EndpointRepoListRunners); n != 4 {
		t.Fatalf("calls = %d", n)
	}
	clk.SetTime(clk.Now().Add(time.Hour))
	if _, _, err := patClient(t, s).Actions.ListRunners(ctx, "acme", "widgets", nil); err != nil {
		t.Fatalf("in the next window: %v", err)
	}
	if rem := s.RateRemaining(); len(rem) != 1 {
		t.Fatalf("budgets = %v", rem)
	}
	// A test can start close to exhaustion.
	s.SetRateUsed(3)
	_, _, err = patClient(t, s).Actions.ListRunners(ctx, "acme", "widgets", nil)
	if !errors.As(err, &rl) {
		t.Fatalf("after SetRateUsed(limit) = %v", err)
	}
	s.SetRateLimit(10)
	if _, resp, err := patClient(t, s).Actions.ListRunners(ctx, "acme", "widgets", nil); err != nil || resp.Rate.Remaining != 6 {
		t.Fatalf("after SetRateLimit(10): %v, %+v", err, resp)
	}
}

// Runner listings are paginated with GitHub's Link header, also under
// /api/v3 and for runner groups.
func TestPagination(t *testing.T) {
	s := startSim(t, githubsim.Options{})
	ctx := ctxT(t)
	gh, err := gogithub.NewClient(nil).WithAuthToken(s.PAT()).WithEnterpriseURLs(s.URL(), s.URL())
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := gh.Actions.CreateOrganizationRegistrationToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := s.RegisterRunner(githubsim.RegisterRequest{URL: s.URL() + "acme", Token: tok.GetToken(), Name: fmt.Sprintf("r%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	opts := &gogithub.ListOptions{PerPage: 2}
	for {
		page, resp, err := gh.Actions.ListOrganizationRunners(ctx, "acme", opts)
		if err != nil {
			t.Fatal(err)
		}
		if page.TotalCount != 5 || resp.LastPage != 0 && resp.LastPage != 3 {
			t.Fatalf("total %d, last page %d", page.TotalCount, resp.LastPage)
		}
		if !strings.Contains(resp.Header.Get("Link"), "/api/v3/orgs/acme/actions/runners") && resp.NextPage != 0 {
			t.Fatalf("Link = %q", resp.Header.Get("Link"))
		}
		for _, r := range page.Runners {
			names = append(names, r.GetName())
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	if strings.Join(names, ",") != "r0,r1,r2,r3,r4" {
		t.Fatalf("names = %v", names)
	}
	for _, r := range s.Requests() {
		if !strings.HasPrefix(r.Path, "/api/v3/") {
			t.Fatalf("request %+v not below /api/v3", r)
		}
	}
	for i := range 3 {
		if _, err := s.AddRunnerGroup("acme", fmt.Sprintf("g%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	groups, resp, err := gh.Actions.ListOrganizationRunnerGroups(ctx, "acme", &gogithub.ListOrgRunnerGroupOptions{ListOptions: gogithub.ListOptions{PerPage: 3}})
	if err != nil || groups.TotalCount != 4 || len(groups.RunnerGroups) != 3 || resp.NextPage != 2 ||
		groups.RunnerGroups[0].GetName() != "Default" || !groups.RunnerGroups[0].GetDefault() || groups.RunnerGroups[0].GetID() != 1 {
		t.Fatalf("groups = %s, %v", gogithub.Stringify(groups), err)
	}
}

// Injected faults look like GitHub's own: go-github recognises the
// secondary rate limit and reads Retry-After.
func TestFaults(t *testing.T) {
	s := startSim(t, githubsim.Options{})
	ctx := ctxT(t)
	if err := s.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointOrgListRunners, Action: githubsim.FaultSecondaryRateLimit, RetryAfter: 1500 * time.Millisecond, Times: 1}); err != nil {
		t.Fatal(err)
	}
	_, _, err := patClient(t, s).Actions.ListOrganizationRunners(ctx, "acme", nil)
	var ab *gogithub.AbuseRateLimitError
	if !errors.As(err, &ab) || ab.RetryAfter == nil || *ab.RetryAfter != 2*time.Second || !strings.Contains(ab.Message, "secondary rate limit") {
		t.Fatalf("secondary limit = %v", err)
	}
	if err := s.InjectFault(githubsim.Fault{Path: `^/orgs/acme/actions/runners$`, Method: "GET", Action: githubsim.FaultHTTPError, Status: 429, RetryAfter: 3 * time.Second, Times: 2}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, resp, err := patClient(t, s).Actions.ListOrganizationRunners(ctx, "acme", nil)
		wantStatus(t, err, http.StatusTooManyRequests)
		if resp.Header.Get("Retry-After") != "3" {
			t.Fatalf("Retry-After = %q", resp.Header.Get("Retry-After"))
		}
	}
	if s.PendingFaults() != 0 {
		t.Fatal("a fault for 2 requests is still armed")
	}
	if err := s.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointOrgListRunners, Action: githubsim.FaultHTTPError, Status: 502, Times: 1}); err != nil {
		t.Fatal(err)
	}
	_, _, err = patClient(t, s).Actions.ListOrganizationRunners(ctx, "acme", nil)
	wantStatus(t, err, http.StatusBadGateway)

	if err := s.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointOrgListRunners, Action: githubsim.FaultDelay, Delay: 300 * time.Millisecond, Times: 1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, _, err := patClient(t, s).Actions.ListOrganizationRunners(ctx, "acme", nil); err != nil || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("delayed call: %v after %s", err, time.Since(start))
	}
	if err := s.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointOrgListRunners, Action: githubsim.FaultHang}); err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, _, err := patClient(t, s).Actions.ListOrganizationRunners(hctx, "acme", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung call = %v", err)
	}
	s.ClearFaults()
	if err := s.InjectFault(githubsim.Fault{Path: "("}); err == nil {
		t.Fatal("an invalid path expression must be refused")
	}
	// Faulted requests cost no budget; every request is counted.
	if n := s.Calls(githubsim.EndpointOrgListRunners); n != 6 {
		t.Fatalf("calls = %d, want 6", n)
	}
}

// A JIT config starts its runner once; a forged or reused one is refused.
func TestJITConfigRun(t *testing.T) {
	s := startSim(t, githubsim.Options{})
	gh := patClient(t, s)
	ctx := ctxT(t)
	jit, _, err := gh.Actions.GenerateRepoJITConfig(ctx, "acme", "widgets", &gogithub.GenerateJITConfigRequest{Name: "j1", RunnerGroupID: 1, Labels: []string{"linux"}})
	if err != nil {
		t.Fatal(err)
	}
	if jit.GetRunner().GetStatus() != "offline" || jit.GetEncodedJITConfig() == "" {
		t.Fatalf("jit = %s", gogithub.Stringify(jit.GetRunner()))
	}
	_, _, err = gh.Actions.GenerateRepoJITConfig(ctx, "acme", "widgets", &gogithub.GenerateJITConfigRequest{Name: "j1", RunnerGroupID: 1, Labels: []string{"linux"}})
	wantStatus(t, err, http.StatusConflict)
	_, _, err = gh.Actions.GenerateRepoJITConfig(ctx, "acme", "widgets", &gogithub.GenerateJITConfigRequest{Name: "j2", RunnerGroupID: 7, Labels: []string{"linux"}})
	wantStatus(t, err, http.StatusNotFound)
	_, _, err = gh.Actions.GenerateRepoJITConfig(ctx, "acme", "widgets", &gogithub.GenerateJITConfigRequest{Name: "j2", RunnerGroupID: 1})
	wantStatus(t, err, http.StatusUnprocessableEntity)

	if _, err := s.RunRunner(ctx, githubsim.RunRequest{JITConfig: "bm90IGEgY29uZmln"}); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("a forged config = %v", err)
	}
	if _, err := s.RunRunner(ctx, githubsim.RunRequest{ID: jit.GetRunner().GetID()}); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("a JIT runner started by ID, without its credential = %v", err)
	}
	r, err := s.RunRunner(ctx, githubsim.RunRequest{JITConfig: jit.GetEncodedJITConfig()})
	if err != nil || r.Status != "online" || !r.JIT || !r.Ephemeral {
		t.Fatalf("run = %+v, %v", r, err)
	}
	if err := s.StopRunner(r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunRunner(ctx, githubsim.RunRequest{JITConfig: jit.GetEncodedJITConfig()}); statusOf(err) != http.StatusConflict {
		t.Fatalf("a JIT config used twice = %v", err)
	}
	if _, err := gh.Actions.RemoveRunner(ctx, "acme", "widgets", r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunRunner(ctx, githubsim.RunRequest{JITConfig: jit.GetEncodedJITConfig()}); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("the config of a deleted runner = %v", err)
	}
}

// Registration and remove tokens are scoped and expire after an hour.
func TestRegistrationAndRemoveTokens(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	s := startSim(t, githubsim.Options{Clock: clk})
	gh := patClient(t, s)
	ctx := ctxT(t)
	tok, _, err := gh.Actions.CreateRegistrationToken(ctx, "acme", "widgets")
	if err != nil {
		t.Fatal(err)
	}
	req := githubsim.RegisterRequest{URL: "https://github.com/acme/widgets", Token: tok.GetToken(), Name: "a"}
	if _, err := s.RegisterRunner(req); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RegisterRunner(req); statusOf(err) != http.StatusConflict {
		t.Fatalf("a taken name = %v", err)
	}
	req.Replace = true
	if _, err := s.RegisterRunner(req); err != nil {
		t.Fatalf("--replace: %v", err)
	}
	if _, err := s.RegisterRunner(githubsim.RegisterRequest{URL: "https://github.com/acme", Token: tok.GetToken(), Name: "b"}); statusOf(err) != http.StatusNotFound {
		t.Fatalf("a repository token used for the organization = %v", err)
	}
	if _, err := s.RegisterRunner(githubsim.RegisterRequest{URL: "https://github.com/acme", Token: "x", Name: "b", RunnerGroup: "nope"}); statusOf(err) != http.StatusNotFound {
		t.Fatalf("an unknown token = %v", err)
	}
	rm, _, err := gh.Actions.CreateRemoveToken(ctx, "acme", "widgets")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveRunner(githubsim.RemoveRequest{URL: "https://github.com/acme/widgets", Token: tok.GetToken(), Name: "a"}); statusOf(err) != http.StatusNotFound {
		t.Fatalf("removing with a registration token = %v", err)
	}
	if err := s.RemoveRunner(githubsim.RemoveRequest{URL: "https://github.com/acme/widgets", Token: rm.GetToken(), Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if len(s.Runners()) != 0 {
		t.Fatalf("runners = %+v", s.Runners())
	}
	clk.SetTime(clk.Now().Add(61 * time.Minute))
	req.Name = "late"
	if _, err := s.RegisterRunner(req); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("an expired token = %v", err)
	}
}

// The control endpoints drive the simulation over HTTP.
func TestControlEndpoints(t *testing.T) {
	s := startSim(t, githubsim.Options{})
	s.DropNextDeliveries(1)
	status, body := postJSON(t, s.URL()+"_sim/jobs", map[string]any{"repo": "acme/widgets", "labels": []string{"self-hosted"}, "duration": "90s"})
	var job githubsim.Job
	if status != http.StatusCreated || json.Unmarshal(body, &job) != nil || job.Duration != 90*time.Second || job.Status != githubsim.JobQueued {
		t.Fatalf("queue = %d %s", status, body)
	}
	if status, body := postJSON(t, s.URL()+"_sim/jobs", map[string]any{"repo": "nobody/nothing"}); status != http.StatusNotFound {
		t.Fatalf("an unknown repository = %d %s", status, body)
	}
	get := func(path string, v any) {
		t.Helper()
		res, err := http.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		if err := json.NewDecoder(res.Body).Decode(v); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d, %v", path, res.StatusCode, err)
		}
	}
	var jobs []githubsim.Job
	get("_sim/jobs", &jobs)
	var runners []githubsim.Runner
	get("_sim/runners", &runners)
	if len(jobs) != 1 || jobs[0].ID != job.ID || runners == nil || len(runners) != 0 {
		t.Fatalf("jobs %+v runners %+v", jobs, runners)
	}
	var deliveries []githubsim.Delivery
	eventually.True(t, 5*time.Second, "the dropped delivery recorded", func() bool {
		get("_sim/deliveries", &deliveries)
		return len(deliveries) == 1 && deliveries[0].Attempted
	})
	if deliveries[0].StatusCode != 0 || !strings.Contains(deliveries[0].Error, "simulated") {
		t.Fatalf("delivery = %+v", deliveries[0])
	}
	var stats map[string]int
	get("_sim/stats", &stats)
	if status, _ := postJSON(t, s.URL()+"_sim/runners/stop", map[string]int{"id": 42}); status != http.StatusNotFound {
		t.Fatalf("stopping an unknown runner = %d", status)
	}
	if status, _ := postJSON(t, s.URL()+"_sim/runners/register", "not an object"); status != http.StatusBadRequest {
		t.Fatalf("a bad body = %d", status)
	}
}

// Close ends everything, even a run.sh waiting on its runner.
func TestCloseUnblocksWaiters(t *testing.T) {
	s := githubsim.New(githubsim.Options{AppKey: testKey()})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	gh := patClient(t, s)
	tok, _, err := gh.Actions.CreateRegistrationToken(ctxT(t), "acme", "widgets")
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.RegisterRunner(githubsim.RegisterRequest{URL: s.URL() + "acme/widgets", Token: tok.GetToken(), Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.RunRunner(context.Background(), githubsim.RunRequest{ID: r.ID, Wait: true})
		errc <- err
	}()
	if _, err := s.QueueJob("acme/widgets", []string{"self-hosted"}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-errc:
		if statusOf(err) != http.StatusServiceUnavailable {
			t.Fatalf("the waiter got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not released")
	}
	s.Close() // twice is fine
}

// ---------------------------------------------------------------------------

type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
