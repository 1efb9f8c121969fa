package spire

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CallTimeout bounds one call to the SPIRE server's admin API, whatever
// deadline the caller's context has (an earlier one still wins): every call
// is a single small request (a list is paged, pageSize entries a page), so
// a server that takes longer is hung, and a reconcile waiting on it would
// hold a worker other objects need.
const CallTimeout = 10 * time.Second

// ConnectTimeout bounds one attempt to reach the server (TCP, the TLS
// handshake and HTTP/2's settings): an address that accepts a connection
// and never speaks fails the attempt instead of holding it.
const ConnectTimeout = 10 * time.Second

// Option changes a Client.
type Option func(*options)

type options struct{ callTimeout time.Duration }

// WithCallTimeout replaces CallTimeout for this client's calls.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.callTimeout = d
		}
	}
}

// connectParams are the dial options every connection the package makes
// uses: each attempt bounded by ConnectTimeout, retried with gRPC's backoff.
func connectParams() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: ConnectTimeout})
}

// deadlineConn gives every unary call a deadline: the SPIRE API calls the
// Client makes are all unary. A call that runs out of it fails with
// codes.DeadlineExceeded and a message saying how long the server was
// given, so apiError reports it as a transient SPIREUnavailable.
type deadlineConn struct {
	grpc.ClientConnInterface
	timeout time.Duration
}

func (d deadlineConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	callCtx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	err := d.ClientConnInterface.Invoke(callCtx, method, args, reply, opts...)
	// The deadline travels to the server too (grpc-timeout), and a server
	// that honours it may end the call a moment before the client's own
	// timer fires: either way the call ran out of this call's time, not the
	// caller's.
	if err != nil && ctx.Err() == nil && (errors.Is(callCtx.Err(), context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded) {
		return status.Errorf(codes.DeadlineExceeded, "the SPIRE server did not answer %s within %s", method, d.timeout)
	}
	return err
}
