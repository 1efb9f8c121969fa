package spire_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/spiretest"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

const trustDomain = "example.org"

// dial returns a client of installation on srv's admin socket.
func dial(t *testing.T, srv *spiretest.Server, installation string) *spire.Client {
	t.Helper()
	c, err := spire.DialSocket(srv.SocketPath, trustDomain, installation)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func machineOf(installation, name string) spire.MachineID {
	return spire.MachineID{TrustDomain: trustDomain, Installation: installation, Kind: "MachineClaim", Namespace: "ci", Name: name, UID: "uid-" + name}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestJoinToken: a token is bound to its machine, honours its TTL, lets one
// real agent attest and refuses a second; the agent is listed for its own
// installation only, and evicting it removes it and its alias.
func TestJoinToken(t *testing.T) {
	srv := spiretest.StartServer(t, trustDomain)
	ctx := ctxFor(t)
	a, b := dial(t, srv, "alpha"), dial(t, srv, "beta")
	m := machineOf("alpha", "runner-1")

	before := time.Now()
	tok, err := a.CreateJoinToken(ctx, m, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Value == "" || tok.Machine != m {
		t.Fatalf("token for %s: machine %s, empty value %v", m, tok.Machine, tok.Value == "")
	}
	// The server reports expiry in whole seconds.
	if lo, hi := before.Add(10*time.Minute-time.Second), time.Now().Add(10*time.Minute+time.Second); tok.ExpiresAt.Before(lo) || tok.ExpiresAt.After(hi) {
		t.Fatalf("token expires at %s, want within [%s, %s]", tok.ExpiresAt, lo, hi)
	}
	for _, s := range []string{fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s", tok, tok, tok, tok)} {
		if strings.Contains(s, tok.Value) {
			t.Fatal("formatting a JoinToken shows its value")
		}
	}

	if _, err := a.CreateJoinToken(ctx, machineOf("beta", "x"), time.Minute); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("token for another installation's machine: %v, want ErrNotOwned", err)
	}
	if _, err := a.CreateJoinToken(ctx, m, 500*time.Millisecond); err == nil {
		t.Fatal("a TTL under a second was accepted")
	}

	// A workload entry under the machine: the agent that attests with the
	// machine's token serves it, which shows the token's alias binds them.
	probe, err := m.Workload("probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateEntry(ctx, spire.EntrySpec{SPIFFEID: probe, Parent: m, Selectors: []spire.Selector{{Type: "unix", Value: fmt.Sprintf("uid:%d", os.Getuid())}}}); err != nil {
		t.Fatal(err)
	}

	bundle, err := a.TrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(bundle), "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("trust bundle is not PEM certificates: %.40q", bundle)
	}
	// The agent verifies the server with the bundle, as a machine will.
	first := srv.StartAgent(t, tok.Value, bundle)
	first.WaitHealthy(t, time.Minute)
	first.WaitSVID(t, probe, time.Minute)

	agents, err := a.ListAgents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(agents) != 1 || agents[0].Machine != m || agents[0].Banned || !agents[0].ExpiresAt.After(time.Now()) {
		t.Fatalf("alpha's agents = %+v, want one, for %s, with a live SVID", agents, m)
	}
	agent := agents[0]
	if other, err := b.ListAgents(ctx); err != nil || len(other) != 0 {
		t.Fatalf("beta's agents = %+v, %v; want none", other, err)
	}

	// The token was used: a second agent presenting it is refused, and gives up.
	second := srv.StartAgent(t, tok.Value, nil)
	if log, refused := second.WaitLog("InvalidArgument desc = failed to attest: join token does not exist or has already been used", time.Minute); !refused {
		t.Fatalf("the server did not refuse a second agent with the used token; its log:\n%s", log)
	}
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 1 {
		t.Fatalf("after the refused agent, alpha's agents = %+v, %v; want the first only", agents, err)
	}

	if err := b.EvictAgent(ctx, agent.ID); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("beta evicting alpha's agent: %v, want ErrNotOwned", err)
	}
	for i := range 2 { // the second eviction finds nothing left, and succeeds
		if err := a.EvictAgent(ctx, agent.ID); err != nil {
			t.Fatalf("evict #%d: %v", i+1, err)
		}
	}
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 0 {
		t.Fatalf("after eviction, alpha's agents = %+v, %v; want none", agents, err)
	}
	entries, err := a.ListEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.ParentID == agent.ID {
			t.Fatalf("the evicted agent's alias %s is still registered", e.SPIFFEID)
		}
	}
}

// TestJoinTokenExpires: an agent presenting a token past its TTL is refused.
func TestJoinTokenExpires(t *testing.T) {
	srv := spiretest.StartServer(t, trustDomain)
	ctx := ctxFor(t)
	a := dial(t, srv, "alpha")
	tok, err := a.CreateJoinToken(ctx, machineOf("alpha", "late"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// ExpiresAt is in whole seconds: wait until the server's clock is past it.
	time.Sleep(time.Until(tok.ExpiresAt) + 1500*time.Millisecond)
	agent := srv.StartAgent(t, tok.Value, nil)
	if log, refused := agent.WaitLog("InvalidArgument desc = join token expired", time.Minute); !refused {
		t.Fatalf("the server did not refuse an agent with an expired token; its log:\n%s", log)
	}
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 0 {
		t.Fatalf("agents = %+v, %v; want none", agents, err)
	}
}

// TestEntries: entries are created and deleted idempotently, and each
// installation lists and deletes only its own.
func TestEntries(t *testing.T) {
	srv := spiretest.StartServer(t, trustDomain)
	testEntries(t, dial(t, srv, "alpha"), dial(t, srv, "beta"))
}

// testEntries is the entries' contract, for the real server and spirefake:
// a and b are the clients of installations alpha and beta on one server.
func testEntries(t *testing.T, a, b spire.Server) {
	ctx := ctxFor(t)
	m := machineOf("alpha", "runner-1")
	workload, err := m.Workload("runner")
	if err != nil {
		t.Fatal(err)
	}
	spec := spire.EntrySpec{SPIFFEID: workload, Parent: m, Selectors: []spire.Selector{{Type: "unix", Value: "uid:1001"}}, X509SVIDTTL: time.Hour}

	e1, err := a.CreateEntry(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := a.CreateEntry(ctx, spec)
	if err != nil {
		t.Fatalf("creating the same entry again: %v", err)
	}
	if e1.ID == "" || e1.ID != e2.ID || e1.SPIFFEID != workload || e1.ParentID != m.String() || e1.NodeAlias {
		t.Fatalf("entries %+v and %+v, want one entry %s under %s", e1, e2, workload, m)
	}

	bm := machineOf("beta", "runner-9")
	bw, _ := bm.Workload("runner")
	eb, err := b.CreateEntry(ctx, spire.EntrySpec{SPIFFEID: bw, Parent: bm, Selectors: []spire.Selector{{Type: "unix", Value: "uid:1001"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateEntry(ctx, spire.EntrySpec{SPIFFEID: bw, Parent: m, Selectors: spec.Selectors}); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("alpha registering under beta's prefix: %v, want ErrNotOwned", err)
	}
	// A join token's alias is listed too, marked, for cleanup.
	if _, err := a.CreateJoinToken(ctx, m, time.Minute); err != nil {
		t.Fatal(err)
	}

	ids := func(c spire.Server) map[string]spire.Entry {
		t.Helper()
		list, err := c.ListEntries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]spire.Entry{}
		for _, e := range list {
			out[e.ID] = e
		}
		return out
	}
	alpha := ids(a)
	if _, ok := alpha[e1.ID]; !ok || len(alpha) != 2 {
		t.Fatalf("alpha lists %+v, want its workload entry and one node alias", alpha)
	}
	for id, e := range alpha {
		if id != e1.ID && (!e.NodeAlias || e.SPIFFEID != m.String()) {
			t.Fatalf("alpha's second entry %s (%s) is not the node alias of %s", id, e.SPIFFEID, m)
		}
	}
	if beta := ids(b); len(beta) != 1 || beta[eb.ID].SPIFFEID != bw {
		t.Fatalf("beta lists %+v, want only its own %s", beta, bw)
	}

	if err := b.DeleteEntry(ctx, e1.ID); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("beta deleting alpha's entry: %v, want ErrNotOwned", err)
	}
	for i := range 2 {
		if err := a.DeleteEntry(ctx, e1.ID); err != nil {
			t.Fatalf("delete #%d: %v", i+1, err)
		}
	}
	if _, ok := ids(a)[e1.ID]; ok {
		t.Fatal("the deleted entry is still listed")
	}
	if _, ok := ids(b)[eb.ID]; !ok {
		t.Fatal("beta's entry went with alpha's")
	}
}
