package scaleset_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ghscaleset "github.com/actions/scaleset"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
)

const pat = "ghp_hyperfleetscalesettests0000000000001"

func start(t *testing.T, opts githubsim.Options) *githubsim.Server {
	t.Helper()
	opts.PersonalAccessTokens = append(opts.PersonalAccessTokens, pat)
	if opts.MessagePollWait == 0 {
		opts.MessagePollWait = 200 * time.Millisecond
	}
	srv := githubsim.New(opts)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func client(t *testing.T, srv *githubsim.Server, creds github.Config) *ghscaleset.Client {
	t.Helper()
	c, err := scaleset.NewClient(scaleset.ClientConfig{Credentials: creds, ConfigURL: srv.URL() + "acme/widgets", Version: "test", RetryMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Ensure creates the pool's scale set, finds (and leaves alone) one of the
// same name the pool did not record, brings the recorded one in step with
// new labels, changes nothing when it is as asked, and makes it again when
// it was deleted outside HyperFleet. The App's credentials reach the
// service as a PAT's do.
func TestEnsure(t *testing.T) {
	srv := start(t, githubsim.Options{})
	ctx := context.Background()
	app := client(t, srv, github.Config{AppID: srv.AppID(), InstallationID: srv.InstallationID(), PrivateKeyPEM: srv.AppPrivateKeyPEM()})

	set, out, err := scaleset.Ensure(ctx, app, scaleset.Want{Name: "hf-linux", Labels: []string{"hf-linux", "x64"}})
	if err != nil || out != scaleset.Created || set.ID == 0 || !set.RunnerSetting.DisableUpdate {
		t.Fatalf("first Ensure: %+v, %s, %v; want Created with runner updates off", set, out, err)
	}
	found, out, err := scaleset.Ensure(ctx, client(t, srv, github.Config{Token: pat}), scaleset.Want{Name: "hf-linux"})
	if err != nil || out != scaleset.Found || found.ID != set.ID {
		t.Fatalf("Ensure without the recorded ID: %+v, %s, %v; want Found %d", found, out, err, set.ID)
	}
	if got := srv.ScaleSets(); len(got) != 1 || len(got[0].Labels) != 2 {
		t.Fatalf("a Found scale set was changed: %+v", got)
	}
	upd, out, err := scaleset.Ensure(ctx, app, scaleset.Want{Name: "hf-linux", Labels: []string{"hf-linux", "arm64"}, Known: set.ID})
	if err != nil || out != scaleset.Updated || upd.ID != set.ID {
		t.Fatalf("Ensure with new labels: %+v, %s, %v; want Updated", upd, out, err)
	}
	if got := srv.ScaleSets(); got[0].Labels[1] != "arm64" {
		t.Fatalf("labels after the update: %v", got[0].Labels)
	}
	if _, out, err := scaleset.Ensure(ctx, app, scaleset.Want{Name: "hf-linux", Labels: []string{"ARM64", "hf-linux"}, Known: set.ID}); err != nil || out != scaleset.Unchanged {
		t.Fatalf("Ensure as it is (labels in another order and case): %s, %v; want Unchanged", out, err)
	}
	if err := app.DeleteRunnerScaleSet(ctx, set.ID); err != nil {
		t.Fatal(err)
	}
	again, out, err := scaleset.Ensure(ctx, app, scaleset.Want{Name: "hf-linux", Known: set.ID})
	if err != nil || out != scaleset.Created || again.ID == set.ID {
		t.Fatalf("Ensure after the scale set was deleted outside: %+v, %s, %v; want a new one Created", again, out, err)
	}
	if _, _, err := scaleset.Ensure(ctx, app, scaleset.Want{Name: "x", RunnerGroup: "nope"}); err == nil || !strings.Contains(err.Error(), `runner group "nope"`) {
		t.Fatalf("a missing runner group: %v", err)
	}
}

// A listener that died without closing its session holds the scale set
// until GitHub lets the session lapse: OpenSession waits for it, saying
// so, and then opens its own. A live holder is never displaced: after the
// window OpenSession gives up with ErrSessionHeld.
func TestOpenSessionAfterAConflict(t *testing.T) {
	srv := start(t, githubsim.Options{SessionIdleTimeout: time.Second})
	ctx := context.Background()
	c := client(t, srv, github.Config{Token: pat})
	set, _, err := scaleset.Ensure(ctx, c, scaleset.Want{Name: "conflict"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.MessageSessionClient(ctx, set.ID, "dead-leader"); err != nil {
		t.Fatal(err)
	}
	var waits atomic.Int32
	started := time.Now()
	s, err := scaleset.OpenSession(ctx, c, set.ID, "new-leader", scaleset.SessionPolicy{
		Window: 20 * time.Second, FirstBackoff: 100 * time.Millisecond, MaxBackoff: 400 * time.Millisecond,
		Waiting: func(err error, _ time.Duration) {
			if !scaleset.IsSessionConflict(err) {
				t.Errorf("Waiting told of %v", err)
			}
			waits.Add(1)
		},
	})
	if err != nil {
		t.Fatalf("OpenSession after the holder died: %v", err)
	}
	if waits.Load() == 0 || time.Since(started) < 900*time.Millisecond {
		t.Fatalf("opened after %s with %d waits: the dead holder's session had not lapsed yet", time.Since(started), waits.Load())
	}
	if got := srv.ScaleSets()[0].Session; got != "new-leader" {
		t.Fatalf("session held by %q", got)
	}

	// The new holder keeps polling: it is alive, and keeps the session.
	pollCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for pollCtx.Err() == nil {
			_, _ = s.GetMessage(pollCtx, 0, 1)
		}
	}()
	_, err = scaleset.OpenSession(ctx, c, set.ID, "intruder", scaleset.SessionPolicy{Window: 1500 * time.Millisecond, FirstBackoff: 100 * time.Millisecond})
	if !errors.Is(err, scaleset.ErrSessionHeld) {
		t.Fatalf("OpenSession against a live holder: %v, want ErrSessionHeld", err)
	}
	if got := srv.ScaleSets()[0].Session; got != "new-leader" {
		t.Fatalf("the live holder lost its session to %q", got)
	}
}

// A scope URL that names nothing is refused when the client is built,
// with what a scope looks like.
func TestNewClientRefusesAScopeThatNamesNothing(t *testing.T) {
	for _, raw := range []string{"", "github.com/acme", "https://github.com/", "https://github.com/a/b/c"} {
		_, err := scaleset.NewClient(scaleset.ClientConfig{Credentials: github.Config{Token: pat}, ConfigURL: raw})
		if err == nil || !strings.Contains(err.Error(), "scaleset:") {
			t.Errorf("ConfigURL %q: %v, want a refusal", raw, err)
		}
	}
	if _, err := scaleset.NewClient(scaleset.ClientConfig{ConfigURL: "https://github.com/acme"}); err == nil {
		t.Error("no credentials: accepted")
	}
}

// A pool's scope as the scale-set client takes it: github.com's web host
// for github.com, an Enterprise Server's host without /api/v3.
func TestConfigURL(t *testing.T) {
	for _, c := range []struct{ api, owner, repo, org, want string }{
		{"", "acme", "widgets", "", "https://github.com/acme/widgets"},
		{"", "", "", "acme", "https://github.com/acme"},
		{"https://ghe.example.com/api/v3/", "", "", "acme", "https://ghe.example.com/acme"},
		{"https://ghe.example.com/api/v3", "acme", "app", "", "https://ghe.example.com/acme/app"},
		{"http://127.0.0.1:8081//", "acme", "widgets", "", "http://127.0.0.1:8081/acme/widgets"},
	} {
		if got := scaleset.ConfigURL(c.api, c.owner, c.repo, c.org); got != c.want {
			t.Errorf("ConfigURL(%q, %q, %q, %q) = %q, want %q", c.api, c.owner, c.repo, c.org, got, c.want)
		}
	}
}

// desired records what a listener hands HandleDesiredRunnerCount.
type desired struct {
	mu   sync.Mutex
	seen []int
}

func (d *desired) HandleJobStarted(context.Context, *ghscaleset.JobStarted) error     { return nil }
func (d *desired) HandleJobCompleted(context.Context, *ghscaleset.JobCompleted) error { return nil }
func (d *desired) HandleDesiredRunnerCount(_ context.Context, n int) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen = append(d.seen, n)
	return n, nil
}

// all is every count handed so far.
func (d *desired) all() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.seen...)
}

func (d *desired) last() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.seen) == 0 {
		return -1
	}
	return d.seen[len(d.seen)-1]
}

// Listen keeps a scale set's session through its faults: polls answered
// 500 end the session, which is closed and opened again, and the new
// session's statistics restate the demand (nothing lost). When its context
// ends it closes the session, so the next leader opens one at once instead
// of waiting for it to lapse.
func TestListenSurvivesALostSession(t *testing.T) {
	srv := start(t, githubsim.Options{SessionIdleTimeout: time.Hour})
	c := client(t, srv, github.Config{Token: pat})
	set, _, err := scaleset.Ensure(context.Background(), c, scaleset.Want{Name: "listen"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.QueueRun(githubsim.JobSpec{Repo: "acme/widgets", Labels: []string{"listen"}, Matrix: 2}); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		states []string
	)
	cfg := scaleset.ListenConfig{ScaleSetID: set.ID, Owner: "leader-1", MaxRunners: func() int { return 5 }, Retry: 100 * time.Millisecond,
		State: func(s scaleset.SessionState, err error) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, fmt.Sprintf("%s(%v)", s, err != nil))
		}}
	d := &desired{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- scaleset.Listen(ctx, c, cfg, d) }()
	eventually.That(t, 10*time.Second, func() (bool, string) {
		return d.last() == 2, fmt.Sprintf("desired counts %v", d.all())
	})
	if err := srv.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointMessageGet, Times: 1, Action: githubsim.FaultHTTPError, Status: 500}); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		return srv.Stats()[githubsim.EndpointSessionCreate] >= 2 && d.last() == 2, fmt.Sprintf("%d sessions, desired counts %v", srv.Stats()[githubsim.EndpointSessionCreate], d.all())
	})
	mu.Lock()
	joined := strings.Join(states, " ")
	mu.Unlock()
	if !strings.Contains(joined, "Open(false) Closed(true) Open(false)") {
		t.Errorf("session states %s: want it open, closed by the failure, open again", joined)
	}

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Listen after its context ended: %v", err)
	}
	if s := srv.ScaleSets()[0].Session; s != "" {
		t.Fatalf("the session was left open (held by %q)", s)
	}
	// The next leader: no conflict to wait out.
	var waited atomic.Int32
	next := cfg
	next.Owner, next.State = "leader-2", nil
	next.Session.Waiting = func(error, time.Duration) { waited.Add(1) }
	d2 := &desired{}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { _ = scaleset.Listen(ctx2, c, next, d2) }()
	eventually.That(t, 10*time.Second, func() (bool, string) {
		return d2.last() == 2, fmt.Sprintf("the next leader's desired counts %v", d2.all())
	})
	if waited.Load() != 0 {
		t.Fatalf("the next leader waited %d times for a session the last one should have closed", waited.Load())
	}
}
