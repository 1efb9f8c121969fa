package scaleset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/actions/scaleset"
	"github.com/actions/scaleset/listener"
)

// SessionState is where Listen is with a scale set's message session.
type SessionState string

const (
	// SessionOpen: the session is held and polled.
	SessionOpen SessionState = "Open"
	// SessionWaiting: GitHub says another listener holds the session.
	SessionWaiting SessionState = "Waiting"
	// SessionClosed: no session is held (between attempts, or stopped).
	SessionClosed SessionState = "Closed"
)

// Scaler is what Listen hands a scale set's messages to: the library's
// listener.Scaler. HandleDesiredRunnerCount is given statistics'
// totalAssignedJobs, at the session's start and after every message, and
// is what the pool scales on; the job messages are for what they are for
// (a started job marks its runner busy, a completed one lets it go), never
// counted to scale.
type Scaler = listener.Scaler

// ListenConfig says what Listen listens to and how it reports.
type ListenConfig struct {
	// ScaleSetID and Owner (this installation's listener, for GitHub's
	// session) name the session.
	ScaleSetID int
	Owner      string
	// MaxRunners is the capacity reported with every poll: the pool's
	// maxReplicas less what is busy, as the caller counts it.
	MaxRunners func() int
	// Session paces the wait while another listener holds the session.
	Session SessionPolicy
	// Retry is the pause after a failed session before the next; zero
	// means 5 s, doubling to a minute while failures follow each other.
	Retry time.Duration
	// State is told each change of the session's state and why (nil for
	// Open). Optional.
	State func(SessionState, error)
}

// Listen holds the scale set's message session until ctx ends: it opens
// it (waiting out GitHub's session conflict), runs the library's listener
// on it, and when the session fails — a lost connection, 5xx answers, a
// session GitHub dropped — closes what is left and opens a new one, whose
// first statistics restate the demand, so nothing of it is lost. It
// returns ctx's error, or ErrSessionHeld when another listener keeps the
// session past the policy's window (the caller decides when to try again).
func Listen(ctx context.Context, c Sessions, cfg ListenConfig, scaler Scaler) error {
	report := func(s SessionState, err error) {
		if cfg.State != nil {
			cfg.State(s, err)
		}
	}
	retry := cfg.Retry
	if retry <= 0 {
		retry = 5 * time.Second
	}
	pause := retry
	policy := cfg.Session
	waiting := policy.Waiting
	policy.Waiting = func(err error, left time.Duration) {
		report(SessionWaiting, err)
		if waiting != nil {
			waiting(err, left)
		}
	}
	for {
		session, err := OpenSession(ctx, c, cfg.ScaleSetID, cfg.Owner, policy)
		switch {
		case ctx.Err() != nil:
			report(SessionClosed, nil)
			return ctx.Err()
		case errors.Is(err, ErrSessionHeld):
			report(SessionWaiting, err)
			return err
		case err != nil:
			report(SessionClosed, err)
			if !sleep(ctx, pause) {
				return ctx.Err()
			}
			pause = min(2*pause, time.Minute)
			continue
		}
		report(SessionOpen, nil)
		started := time.Now()
		err = run(ctx, session, cfg, scaler)
		// The session is closed even when ctx ended: a new leader must not
		// wait for it to lapse.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = session.Close(closeCtx)
		cancel()
		if ctx.Err() != nil {
			report(SessionClosed, nil)
			return ctx.Err()
		}
		report(SessionClosed, err)
		if time.Since(started) > time.Minute {
			pause = retry // it had been working: the failure is not a run of them
		}
		if !sleep(ctx, pause) {
			return ctx.Err()
		}
		pause = min(2*pause, time.Minute)
	}
}

// run polls one session with the library's listener until it fails.
func run(ctx context.Context, session *scaleset.MessageSessionClient, cfg ListenConfig, scaler Scaler) error {
	capacity := 0
	if cfg.MaxRunners != nil {
		capacity = cfg.MaxRunners()
	}
	l, err := listener.New(session, listener.Config{ScaleSetID: cfg.ScaleSetID, MaxRunners: capacity})
	if err != nil {
		return err
	}
	if cfg.MaxRunners != nil {
		// The capacity changes as runners finish and the spec changes:
		// refreshed before each poll goes out, as often as it matters.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					l.SetMaxRunners(cfg.MaxRunners())
				}
			}
		}()
	}
	if err := l.Run(ctx, scaler); err != nil && ctx.Err() == nil {
		return fmt.Errorf("scale set %d: %w", cfg.ScaleSetID, err)
	}
	return ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
