package spire_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/spirefake"
	"github.com/hyperfleet/hyperfleet/internal/sim/spiretest"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

func csrFor(t *testing.T, id string) []byte {
	t.Helper()
	csr, _, err := spire.NewCSR(id)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

// testMint: an SVID under the installation is signed by the trust bundle's
// authority; one under another installation, or a CSR without one ID, is
// refused before it reaches the server.
func testMint(t *testing.T, a spire.Server) {
	ctx := ctxFor(t)
	id := spire.InstallationPrefix(trustDomain, "alpha") + "credential-endpoint"
	svid, err := a.MintX509SVID(ctx, csrFor(t, id), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if svid.ID != id || len(svid.CertChain) == 0 || !svid.ExpiresAt.After(time.Now()) {
		t.Fatalf("minted %s with %d certificates, expiring %s; want %s, a chain, later than now", svid.ID, len(svid.CertChain), svid.ExpiresAt, id)
	}
	leaf, err := x509.ParseCertificate(svid.CertChain[0])
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := a.TrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		roots.AddCert(c)
	}
	inter := x509.NewCertPool()
	for _, der := range svid.CertChain[1:] {
		c, _ := x509.ParseCertificate(der)
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the minted SVID does not verify against the trust bundle as a server certificate: %v", err)
	}
	other := spire.InstallationPrefix(trustDomain, "beta") + "credential-endpoint"
	if _, err := a.MintX509SVID(ctx, csrFor(t, other), time.Minute); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("minting another installation's ID: %v, want ErrNotOwned", err)
	}
	if _, err := a.MintX509SVID(ctx, []byte("not a CSR"), time.Minute); err == nil {
		t.Fatal("a CSR that does not parse was accepted")
	}
}

func TestMintX509SVID(t *testing.T) {
	srv := spiretest.StartServer(t, trustDomain)
	testMint(t, dial(t, srv, "alpha"))
}

func TestFakeMintX509SVID(t *testing.T) {
	testMint(t, spirefake.NewServer(trustDomain).Client("alpha"))
}

// testForget: ForgetMachine removes a machine's workload entry, its unused
// token's alias and (attest) its attested agent; the neighbouring machine's
// are untouched; a second call succeeds with nothing left.
func testForget(t *testing.T, a spire.Server, attest func(token string)) {
	ctx := ctxFor(t)
	gone, kept := machineOf("alpha", "gone"), machineOf("alpha", "kept")
	for _, m := range []spire.MachineID{gone, kept} {
		w, _ := m.Workload("bootstrap")
		if _, err := a.CreateEntry(ctx, spire.EntrySpec{SPIFFEID: w, Parent: m, Selectors: []spire.Selector{{Type: "unix", Value: fmt.Sprintf("uid:%d", os.Getuid())}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.CreateJoinToken(ctx, m, time.Minute); err != nil { // never used
			t.Fatal(err)
		}
	}
	used, err := a.CreateJoinToken(ctx, gone, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	attest(used.Value)
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 1 {
		t.Fatalf("agents before = %+v, %v; want gone's", agents, err)
	}
	for i := range 2 {
		if err := a.ForgetMachine(ctx, gone); err != nil {
			t.Fatalf("forget #%d: %v", i+1, err)
		}
	}
	if agents, err := a.ListAgents(ctx); err != nil || len(agents) != 0 {
		t.Fatalf("agents after = %+v, %v; want none", agents, err)
	}
	entries, err := a.ListEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		m, _, _ := spire.ParseID(e.SPIFFEID)
		if m == gone {
			t.Fatalf("entry %s of the forgotten machine is left", e.SPIFFEID)
		}
		left = append(left, e.SPIFFEID)
	}
	if len(left) != 2 {
		t.Fatalf("entries left = %v, want kept's workload and alias", left)
	}
	if err := a.ForgetMachine(ctx, machineOf("beta", "x")); !errors.Is(err, providers.ErrNotOwned) {
		t.Fatalf("forgetting another installation's machine: %v, want ErrNotOwned", err)
	}
}

func TestForgetMachine(t *testing.T) {
	srv := spiretest.StartServer(t, trustDomain)
	a := dial(t, srv, "alpha")
	testForget(t, a, func(token string) {
		bundle, err := a.TrustBundle(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		srv.StartAgent(t, token, bundle).WaitHealthy(t, time.Minute)
	})
}

func TestFakeForgetMachine(t *testing.T) {
	srv := spirefake.NewServer(trustDomain)
	testForget(t, srv.Client("alpha"), func(token string) {
		if _, err := srv.Attest(token); err != nil {
			t.Fatal(err)
		}
	})
}
