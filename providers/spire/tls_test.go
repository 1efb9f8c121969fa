package spire_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/spiretest"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// TestDialTLS: over TCP with mTLS, an SVID the server lists in admin_ids
// administers it as the socket does; another SVID of the same trust domain
// is refused, and a client that does not trust the server's bundle never
// gets to ask.
func TestDialTLS(t *testing.T) {
	srv := spiretest.StartServer(t, trustDomain)
	ctx := ctxFor(t)
	admin, err := spire.DialTLS(srv.Address(), srv.AdminCredentials(t, spiretest.AdminID(trustDomain)), trustDomain, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	m := machineOf("alpha", "over-tcp")
	if _, err := admin.CreateJoinToken(ctx, m, time.Minute); err != nil {
		t.Fatalf("an admin over TCP could not mint a token: %v", err)
	}
	if entries, err := admin.ListEntries(ctx); err != nil || len(entries) != 1 {
		t.Fatalf("entries = %+v, %v; want the token's alias", entries, err)
	}

	nobody, err := spire.DialTLS(srv.Address(), srv.AdminCredentials(t, "spiffe://"+trustDomain+"/hyperfleet/"+spiretest.AdminInstallation+"/nobody"), trustDomain, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nobody.Close() })
	if _, err := nobody.CreateJoinToken(ctx, m, time.Minute); err == nil {
		t.Fatal("an SVID not in admin_ids minted a join token")
	} else if _, ok := providers.IsPermanent(err); !ok {
		t.Fatalf("refused with %v, want a permanent refusal (PermissionDenied)", err)
	}

	creds := srv.AdminCredentials(t, spiretest.AdminID(trustDomain))
	creds.BundlePEM = spiretest.StartServer(t, trustDomain).AdminCredentials(t, spiretest.AdminID(trustDomain)).BundlePEM
	stranger, err := spire.DialTLS(srv.Address(), creds, trustDomain, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Close() })
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := stranger.ListEntries(short); err == nil || errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("a client trusting another server's bundle listed entries: %v", err)
	}
	if _, err := spire.DialTLS(srv.Address(), spire.AdminCredentials{CertPEM: []byte("x"), KeyPEM: []byte("y")}, trustDomain, "alpha"); err == nil {
		t.Fatal("credentials that do not parse were accepted")
	}
}
