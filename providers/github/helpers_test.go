package github_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"io"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

var (
	keyOnce sync.Once
	appKey  *rsa.PrivateKey
)

// testKey is one App key for the whole package: generating 2048-bit keys
// under the race detector is slow.
func testKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
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
		opts.AppKey = testKey(t)
	}
	opts.ErrorLog = log.New(io.Discard, "", 0)
	sim := githubsim.New(opts)
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	return sim
}

// appConfig authenticates as the simulator's App installation, with a
// RateLimiter of its own so tests do not share budgets.
func appConfig(sim *githubsim.Server) github.Config {
	return github.Config{
		BaseURL: sim.URL(), AppID: sim.AppID(), InstallationID: sim.InstallationID(), PrivateKeyPEM: sim.AppPrivateKeyPEM(),
		Timeout: 5 * time.Second, RateLimiter: github.NewRateLimiter(github.RateLimiterOptions{}),
	}
}

func patConfig(sim *githubsim.Server) github.Config {
	return github.Config{BaseURL: sim.URL(), Token: sim.PAT(), Timeout: 5 * time.Second,
		RateLimiter: github.NewRateLimiter(github.RateLimiterOptions{})}
}

func newClient(t *testing.T, cfg github.Config) *github.Client {
	t.Helper()
	c, err := github.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var (
	repoScope = github.Scope{Owner: "acme", Repository: "widgets"}
	orgScope  = github.Scope{Organization: "acme"}
)

// eventually polls cond until it holds or the bound passes.
// wantTransient checks err is transient with reason and returns its After.
func wantTransient(t *testing.T, err error, reason string) time.Duration {
	t.Helper()
	var tr *providers.TransientError
	if !errors.As(err, &tr) || tr.Reason != reason {
		t.Fatalf("error = %v; want a transient error with reason %s", err, reason)
	}
	return tr.After
}

// wantPermanent checks err is permanent with reason and a message saying
// every part, and returns the message.
func wantPermanent(t *testing.T, err error, reason string, msgParts ...string) string {
	t.Helper()
	pe, ok := providers.IsPermanent(err)
	if !ok || pe.Reason != reason {
		t.Fatalf("error = %v; want a permanent error with reason %s", err, reason)
	}
	for _, part := range msgParts {
		if !strings.Contains(pe.Message, part) {
			t.Errorf("message %q does not say %q", pe.Message, part)
		}
	}
	return pe.Message
}

// noSecrets fails when text holds any of the secrets.
func noSecrets(t *testing.T, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Fatalf("a secret leaked into %q", text)
		}
	}
}

// register plays config.sh with a registration token.
func register(t *testing.T, sim *githubsim.Server, scope github.Scope, tok github.Token, name string, ephemeral bool, labels ...string) githubsim.Runner {
	t.Helper()
	r, err := sim.RegisterRunner(githubsim.RegisterRequest{URL: sim.URL() + scope.String(), Token: tok.Value, Name: name, Labels: labels, Ephemeral: ephemeral})
	if err != nil {
		t.Fatalf("registering %s: %v", name, err)
	}
	return r
}
