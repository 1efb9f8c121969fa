package spire_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/spiretest"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/providers/spire/devid"
)

// TestTPMAttestation runs SPIRE's tpm_devid node attestor end to end on
// software TPMs: a machine whose vTPM holds a DevID for its claim's UID is
// given the machine's identity and its workload's SVID; a machine with a
// DevID for another UID attests as a node but is not that machine; a DevID
// from another authority is refused; forgetting the machine deletes its
// agent and its alias, and the node can no longer be the machine.
func TestTPMAttestation(t *testing.T) {
	srv, lab := spiretest.StartServerWithTPM(t, trustDomain)
	ctx := ctxFor(t)
	a, b := dial(t, srv, "alpha"), dial(t, srv, "beta")
	m := machineOf("alpha", "tpm-1")
	bundle, err := a.TrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}

	alias, err := a.CreateTPMAlias(ctx, m, m.UID)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.CreateTPMAlias(ctx, m, m.UID)
	if err != nil || again.ID != alias.ID || !alias.NodeAlias {
		t.Fatalf("second CreateTPMAlias = %+v, %v; want the first (%+v), a node alias", again, err, alias)
	}
	if _, err := b.CreateTPMAlias(ctx, m, m.UID); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("another installation aliasing alpha's machine: %v, want ErrNotOwned", err)
	}
	if _, err := a.CreateTPMAlias(ctx, m, "not a cn"); !errors.Is(err, spire.ErrInvalidID) {
		t.Fatalf("a CN with spaces: %v, want ErrInvalidID", err)
	}
	w, _ := m.Workload(spire.BootstrapWorkload)
	if _, err := a.CreateEntry(ctx, spire.EntrySpec{SPIFFEID: w, Parent: m, Selectors: []spire.Selector{{Type: "unix", Value: fmt.Sprintf("uid:%d", os.Getuid())}}}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	agent := srv.StartTPMAgent(t, lab.NewTPM(t, m.UID), bundle)
	agent.WaitSVID(t, w, time.Minute)
	t.Logf("TPM agent start → workload SVID: %s", time.Since(start).Round(time.Millisecond))

	agents, err := a.ListAgents(ctx)
	if err != nil || len(agents) != 1 || agents[0].Machine != m {
		t.Fatalf("alpha's agents = %+v, %v; want one, of %s", agents, err, m)
	}
	if others, err := b.ListAgents(ctx); err != nil || len(others) != 0 {
		t.Fatalf("beta's agents = %+v, %v; want none", others, err)
	}
	if err := b.EvictAgent(ctx, agents[0].ID); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("beta evicting alpha's TPM agent: %v, want ErrNotOwned", err)
	}

	// A machine whose DevID names another claim attests as a node, but no
	// alias makes it this machine.
	stranger := srv.StartTPMAgent(t, lab.NewTPM(t, "uid-someone-else"), bundle)
	stranger.WaitHealthy(t, time.Minute)
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 1 {
		t.Fatalf("alpha's agents with a stranger attested = %+v, %v; want only tpm-1's", agents, err)
	}

	// A DevID of an authority the server does not trust is refused.
	rogueCA, err := devid.NewAuthority("rogue")
	if err != nil {
		t.Fatal(err)
	}
	rogueTPM := lab.NewTPM(t, "")
	rw, err := devid.Open(rogueTPM.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devid.Provision(rw, rogueCA, m.UID); err != nil {
		t.Fatal(err)
	}
	rogue := srv.StartTPMAgent(t, rogueTPM, bundle)
	if log, refused := rogue.WaitLog("unable to verify DevID signature", time.Minute); !refused {
		t.Fatalf("the agent with a rogue DevID was not refused:\n%s", log)
	}

	for i := range 2 {
		if err := a.ForgetMachine(ctx, m); err != nil {
			t.Fatalf("forget #%d: %v", i+1, err)
		}
	}
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 0 {
		t.Fatalf("agents after forgetting = %+v, %v; want none", agents, err)
	}
	if entries, err := a.ListEntries(ctx); err != nil || len(entries) != 0 {
		t.Fatalf("entries after forgetting = %+v, %v; want none", entries, err)
	}
}

// TestDevIDStoredInTPM: what Provision stores, Read returns, from the TPM
// alone; provisioning again replaces it.
func TestDevIDStoredInTPM(t *testing.T) {
	_, lab := spiretest.StartServerWithTPM(t, trustDomain)
	tpm := lab.NewTPM(t, "")
	rw, err := devid.Open(tpm.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devid.Read(rw); err == nil {
		t.Fatal("Read of an unprovisioned TPM succeeded")
	}
	for _, cn := range []string{"first", "second"} {
		want, err := devid.Provision(rw, lab.Authority, cn)
		if err != nil {
			t.Fatal(err)
		}
		got, err := devid.Read(rw)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.CertPEM) != string(want.CertPEM) || string(got.Public) != string(want.Public) || string(got.Private) != string(want.Private) {
			t.Fatalf("Read after provisioning %s returned another credential", cn)
		}
	}
}
