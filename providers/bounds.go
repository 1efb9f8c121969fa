package providers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Deadlines and bounds every provider's HTTP client keeps, so an outside
// system that accepts a connection and never answers, or answers without
// end, costs only the objects that use it: a hung call ends, its reconcile
// fails with a reason, and the worker moves on to other tenants' objects.
const (
	// DefaultRequestTimeout bounds one HTTP request from dial to the last
	// byte of the body (http.Client.Timeout).
	DefaultRequestTimeout = 30 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for a response's headers
	// once the request is sent: shorter than the request timeout, so an
	// endpoint that holds a connection without answering is named as such
	// (TimeoutError) rather than as a cancelled request.
	DefaultResponseHeaderTimeout = 15 * time.Second
	// DialTimeout and TLSHandshakeTimeout bound reaching the endpoint.
	DialTimeout         = 10 * time.Second
	TLSHandshakeTimeout = 10 * time.Second
)

// ErrResponseTooLarge is returned by reads past a BoundedTransport's body
// limit: the body is cut there, never buffered whole.
var ErrResponseTooLarge = errors.New("response body too large")

// TimeoutError is a request that got no answer in time. It is a net.Error
// whose Timeout is true, so providers classify it as unreachable, and its
// message says that the endpoint timed out and where.
type TimeoutError struct {
	Host string
	Err  error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s timed out: no answer in time (%v)", e.Host, e.Err)
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// Timeout implements net.Error.
func (e *TimeoutError) Timeout() bool { return true }

// Temporary implements net.Error.
func (e *TimeoutError) Temporary() bool { return true }

// BoundedTransport limits what one response may cost: its body is read
// through an io.LimitReader of MaxBody bytes, and a read past that fails
// with ErrResponseTooLarge (a client decoding it gets that error, never a
// silently truncated document); a request that timed out fails with a
// TimeoutError naming the host.
type BoundedTransport struct {
	Base    http.RoundTripper
	MaxBody int64
}

// RoundTrip implements http.RoundTripper.
func (t *BoundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.Base.RoundTrip(req)
	if err != nil {
		if timedOut(req.Context(), err) {
			return nil, &TimeoutError{Host: req.URL.Host, Err: err}
		}
		return nil, err
	}
	if res.Body != nil && t.MaxBody > 0 {
		res.Body = &limitedBody{
			r: io.LimitReader(res.Body, t.MaxBody+1), c: res.Body, limit: t.MaxBody,
			what: req.Method + " " + req.URL.Host + req.URL.Path,
		}
	}
	return res, nil
}

func timedOut(ctx context.Context, err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// limitedBody reads at most limit bytes; the byte after them is the proof
// the body was longer, and turns into ErrResponseTooLarge.
type limitedBody struct {
	r     io.Reader
	c     io.Closer
	read  int64
	limit int64
	what  string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += int64(n)
	if over := b.read - b.limit; over > 0 {
		// The limit+1st byte arrived: hand back what is within the limit
		// and fail, so no caller mistakes a cut body for a whole one.
		return n - int(over), fmt.Errorf("%w: %s sent more than %d bytes", ErrResponseTooLarge, b.what, b.limit)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.c.Close() }
