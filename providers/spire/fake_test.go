package spire_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/spirefake"
	"github.com/hyperfleet/hyperfleet/providers"
)

// TestFakeEntries holds spirefake to the contract the real server keeps.
func TestFakeEntries(t *testing.T) {
	srv := spirefake.NewServer(trustDomain)
	testEntries(t, srv.Client("alpha"), srv.Client("beta"))
}

// TestFakeJoinToken: spirefake's tokens are single-use and expire, and its
// agents are scoped and evicted as the real server's (TestJoinToken).
func TestFakeJoinToken(t *testing.T) {
	ctx := ctxFor(t)
	now := time.Unix(1_800_000_000, 0)
	srv := spirefake.NewServer(trustDomain)
	srv.Now = func() time.Time { return now }
	a, b := srv.Client("alpha"), srv.Client("beta")
	m := machineOf("alpha", "runner-1")

	tok, err := a.CreateJoinToken(ctx, m, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TrustBundle(ctx); !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("trust bundle of a fake without one: %v, want ErrNotFound", err)
	}
	srv.Bundle = []byte("-----BEGIN CERTIFICATE-----\n")
	if got, err := a.TrustBundle(ctx); err != nil || string(got) != string(srv.Bundle) {
		t.Fatalf("trust bundle = %q, %v; want %q", got, err, srv.Bundle)
	}
	if !tok.ExpiresAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("expires %s, want %s", tok.ExpiresAt, now.Add(time.Minute))
	}
	if _, err := a.CreateJoinToken(ctx, machineOf("beta", "x"), time.Minute); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("token for beta's machine: %v, want ErrNotOwned", err)
	}
	id, err := srv.Attest(tok.Value)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Attest(tok.Value); !errors.Is(err, spirefake.ErrTokenRefused) {
		t.Fatalf("second attestation: %v, want ErrTokenRefused", err)
	}
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 1 || agents[0].ID != id || agents[0].Machine != m {
		t.Fatalf("alpha's agents = %+v, %v; want %s for %s", agents, err, id, m)
	}
	if agents, err := b.ListAgents(ctx); err != nil || len(agents) != 0 {
		t.Fatalf("beta's agents = %+v, %v; want none", agents, err)
	}

	late, err := a.CreateJoinToken(ctx, m, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if _, err := srv.Attest(late.Value); !errors.Is(err, spirefake.ErrTokenRefused) {
		t.Fatalf("expired token: %v, want ErrTokenRefused", err)
	}

	if err := b.EvictAgent(ctx, id); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("beta evicting alpha's agent: %v, want ErrNotOwned", err)
	}
	for i := range 2 {
		if err := a.EvictAgent(ctx, id); err != nil {
			t.Fatalf("evict #%d: %v", i+1, err)
		}
	}
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 0 {
		t.Fatalf("after eviction, alpha's agents = %+v, %v; want none", agents, err)
	}
}
