package spire_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// hungGRPC is a gRPC server that takes every call and never answers it.
func hungGRPC(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		<-stream.Context().Done()
		return stream.Context().Err()
	}))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// silentTCP accepts connections and holds them without a byte: not even
// HTTP/2's settings.
func silentTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				<-done
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); close(done) })
	return ln.Addr().String()
}

// Every call to a SPIRE server that does not answer ends at the client's
// call timeout, even with a caller's context that has no deadline, as a
// transient SPIREUnavailable saying the server did not answer.
func TestEveryCallHasADeadline(t *testing.T) {
	for name, addr := range map[string]string{"a gRPC server that never answers": hungGRPC(t), "a TCP port that never speaks": silentTCP(t)} {
		t.Run(name, func(t *testing.T) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			c, err := spire.NewClient(conn, trustDomain, "inst", spire.WithCallTimeout(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			calls := map[string]func(context.Context) error{
				"ListEntries": func(ctx context.Context) error { _, err := c.ListEntries(ctx); return err },
				"ListAgents":  func(ctx context.Context) error { _, err := c.ListAgents(ctx); return err },
				"TrustBundle": func(ctx context.Context) error { _, err := c.TrustBundle(ctx); return err },
				"CreateJoinToken": func(ctx context.Context) error {
					_, err := c.CreateJoinToken(ctx, machineOf("inst", "m1"), time.Minute)
					return err
				},
			}
			for call, f := range calls {
				result := make(chan error, 1)
				go func() { result <- f(context.Background()) }()
				select {
				case err := <-result:
					var te *providers.TransientError
					if !errors.As(err, &te) || te.Reason != "SPIREUnavailable" {
						t.Errorf("%s: %v, want a transient SPIREUnavailable", call, err)
					}
					if name == "a gRPC server that never answers" && !strings.Contains(err.Error(), "did not answer") {
						t.Errorf("%s: the error does not say the server did not answer: %v", call, err)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("%s to %s has no deadline: still waiting after 30 s", call, name)
				}
			}
		})
	}
}
