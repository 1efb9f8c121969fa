package providers_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
)

// An endpoint at a link-local address (the cloud metadata service), or an
// unspecified or multicast one, is refused before any packet is sent, with
// a message naming it; loopback and ordinary addresses are dialled.
func TestDialerRefusesMetadataAddresses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range []string{"169.254.169.254:80", "[fe80::1]:443", "0.0.0.0:443", "[::]:443", "[::ffff:169.254.169.254]:80", "224.0.0.1:80"} {
		_, err := providers.Dialer().DialContext(ctx, "tcp", addr)
		if err == nil || !strings.Contains(err.Error(), "refusing to connect") {
			t.Errorf("dialling %s: %v, want a refusal", addr, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	conn, err := providers.Dialer().DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("loopback refused: %v", err)
	}
	_ = conn.Close()
}
