package scaleset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/actions/scaleset"
)

// ConflictWindow is how long OpenSession keeps asking while GitHub says
// another listener holds the scale set's session. A listener that died
// without closing its session holds it until GitHub lets it lapse; the
// runner application itself waits up to four minutes for its own
// (actions/runner, "Stop retry on SessionConflictException after retried
// for 240 seconds"), and so does this.
const ConflictWindow = 4 * time.Minute

// ErrSessionHeld: another listener held the scale set's session for the
// whole ConflictWindow — a live listener, most likely another installation
// serving the same scale set.
var ErrSessionHeld = errors.New("another listener holds the scale set's message session")

// Sessions is what OpenSession needs of a client (*scaleset.Client).
type Sessions interface {
	MessageSessionClient(ctx context.Context, scaleSetID int, owner string, options ...scaleset.HTTPOption) (*scaleset.MessageSessionClient, error)
}

var _ Sessions = (*scaleset.Client)(nil)

// SessionPolicy paces OpenSession's retries; the zero value is GitHub's
// pace: ConflictWindow, first retry after 5 s, doubling to 30 s.
type SessionPolicy struct {
	Window       time.Duration
	FirstBackoff time.Duration
	MaxBackoff   time.Duration
	// Waiting is told each conflict, with the time left, so the caller can
	// say so in the pool's status. Optional.
	Waiting func(err error, left time.Duration)
}

// OpenSession opens the scale set's message session for owner. While GitHub
// answers that the session is held (409), it asks again with backoff for
// the policy's window, then returns ErrSessionHeld; any other error is
// returned at once, for the caller's own backoff.
func OpenSession(ctx context.Context, c Sessions, scaleSetID int, owner string, p SessionPolicy) (*scaleset.MessageSessionClient, error) {
	window, backoff, maxBackoff := p.Window, p.FirstBackoff, p.MaxBackoff
	if window <= 0 {
		window = ConflictWindow
	}
	if backoff <= 0 {
		backoff = 5 * time.Second
	}
	if maxBackoff <= 0 {
		maxBackoff = 30 * time.Second
	}
	deadline := time.Now().Add(window)
	for {
		s, err := c.MessageSessionClient(ctx, scaleSetID, owner)
		if err == nil {
			return s, nil
		}
		if !IsSessionConflict(err) {
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("%w (scale set %d, for %s): %w", ErrSessionHeld, scaleSetID, window, err)
		}
		if p.Waiting != nil {
			p.Waiting(err, left)
		}
		t := time.NewTimer(min(backoff, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// IsSessionConflict reports GitHub's answer to a session asked for while
// another is open: 409 with RunnerScaleSetSessionConflictException (or the
// older service's TaskAgentSessionConflictException).
func IsSessionConflict(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "SessionConflictException")
}
