package scalesetlistener

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	ghscaleset "github.com/actions/scaleset"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
)

// Listeners runs one scale-set listener per pool in scale-set mode. It is a
// manager Runnable that runs on the leader alone: two listeners of one
// scale set would each be refused the other's session.
type Listeners struct {
	// Owner names this installation's listeners to GitHub (a session's
	// owner), e.g. the operator's pod name.
	Owner string
	// Session paces the wait while GitHub says another listener holds a
	// scale set's session; the zero value is GitHub's pace (4 min).
	Session scaleset.SessionPolicy
	// Retry is the pause after a failed session; zero is 5 s.
	Retry time.Duration
	// Wake is told when a pool's demand changed or a job of it started or
	// completed. Set before Start.
	Wake func(pool types.NamespacedName)
	Log  logr.Logger

	mu      sync.Mutex
	ctx     context.Context
	running map[types.NamespacedName]*listening
}

// listening is one pool's listener.
type listening struct {
	scaleSetID int
	client     scaleset.Sessions
	cancel     context.CancelFunc
	done       chan struct{}
	capacity   atomic.Int64

	mu sync.Mutex
	// assigned is the last statistics' totalAssignedJobs; known once the
	// session's first statistics came.
	assigned    int
	known       bool
	state       scaleset.SessionState
	why         error
	lastMessage time.Time
}

// View is what a pool's listener knows.
type View struct {
	// Assigned is GitHub's totalAssignedJobs, valid when Known: the jobs
	// assigned to the scale set and not finished.
	Assigned int
	Known    bool
	Session  scaleset.SessionState
	// Why is the last failure (nil while the session is open).
	Why error
	// LastMessage is when the session last answered with statistics.
	LastMessage time.Time
}

// NeedLeaderElection: only the leader holds sessions.
func (l *Listeners) NeedLeaderElection() bool { return true }

// Start runs until ctx ends, then stops every listener (each closes its
// session, so a new leader need not wait for it to lapse).
func (l *Listeners) Start(ctx context.Context) error {
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	running := l.running
	l.running = nil
	l.mu.Unlock()
	for _, ln := range running {
		ln.cancel()
	}
	for _, ln := range running {
		<-ln.done
	}
	return nil
}

// ErrNotStarted: the Listeners have not started (not the leader yet).
var ErrNotStarted = errors.New("the scale-set listeners have not started")

// Ensure makes the pool's listener run on scale set id through c, reporting
// capacity with every poll; a listener of another scale set (the pool's was
// made again) or through another client (the pool's credentials changed,
// and the old ones may be revoked) is stopped first. It returns
// ErrNotStarted before Start.
func (l *Listeners) Ensure(pool types.NamespacedName, id int, c scaleset.Sessions, capacity int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil || l.ctx.Err() != nil {
		return ErrNotStarted
	}
	if ln, ok := l.running[pool]; ok {
		if ln.scaleSetID == id && ln.client == c {
			ln.capacity.Store(int64(capacity))
			return nil
		}
		ln.cancel()
		<-ln.done
		delete(l.running, pool)
	}
	ctx, cancel := context.WithCancel(l.ctx)
	ln := &listening{scaleSetID: id, client: c, cancel: cancel, done: make(chan struct{}), state: scaleset.SessionClosed}
	ln.capacity.Store(int64(capacity))
	if l.running == nil {
		l.running = map[types.NamespacedName]*listening{}
	}
	l.running[pool] = ln
	go l.run(ctx, pool, ln)
	return nil
}

// Stop ends the pool's listener, closing its session, and waits for it.
func (l *Listeners) Stop(pool types.NamespacedName) {
	l.mu.Lock()
	ln, ok := l.running[pool]
	delete(l.running, pool)
	l.mu.Unlock()
	if ok {
		ln.cancel()
		<-ln.done
	}
	forgetMetrics(pool)
}

// Demand is what the pool's listener knows; false when none runs.
func (l *Listeners) Demand(pool types.NamespacedName) (View, bool) {
	l.mu.Lock()
	ln, ok := l.running[pool]
	l.mu.Unlock()
	if !ok {
		return View{}, false
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return View{Assigned: ln.assigned, Known: ln.known, Session: ln.state, Why: ln.why, LastMessage: ln.lastMessage}, true
}

func (l *Listeners) wake(pool types.NamespacedName) {
	if l.Wake != nil {
		l.Wake(pool)
	}
}

// run holds the pool's session until ctx ends. Another listener holding it
// past the policy's window (another installation, most likely) is said in
// the pool's status and tried again after a pause; nothing else ends it.
func (l *Listeners) run(ctx context.Context, pool types.NamespacedName, ln *listening) {
	defer close(ln.done)
	log := l.Log.WithValues("runnerPool", pool.String(), "scaleSet", ln.scaleSetID)
	cfg := scaleset.ListenConfig{
		ScaleSetID: ln.scaleSetID, Owner: l.Owner, Session: l.Session, Retry: l.Retry,
		MaxRunners: func() int { return int(ln.capacity.Load()) },
		State: func(s scaleset.SessionState, why error) {
			ln.mu.Lock()
			changed := ln.state != s
			ln.state, ln.why = s, why
			ln.mu.Unlock()
			sessionState(pool, s)
			if why != nil && s != scaleset.SessionOpen {
				sessionFailures.WithLabelValues(pool.String()).Inc()
				log.Info("The scale set's message session is not held", "state", s, "reason", why.Error())
			}
			if changed {
				l.wake(pool)
			}
		},
	}
	sc := &scaler{l: l, pool: pool, ln: ln}
	for {
		err := scaleset.Listen(ctx, ln.client, cfg, sc)
		if ctx.Err() != nil {
			return
		}
		// Held elsewhere for the whole window: the pool says so; ask again
		// after as long again, as GitHub lets a dead listener's lapse.
		log.Info("Another listener holds the scale set's session; asking again later", "reason", err.Error())
		t := time.NewTimer(retryHeld(l.Session))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func retryHeld(p scaleset.SessionPolicy) time.Duration {
	if p.Window > 0 {
		return p.Window
	}
	return scaleset.ConflictWindow
}

// scaler is the library's listener.Scaler for one pool: the statistics are
// the demand; the job messages only wake the pool, whose runners' states
// come from GitHub's listing, never from counting messages.
type scaler struct {
	l    *Listeners
	pool types.NamespacedName
	ln   *listening
}

var _ scaleset.Scaler = (*scaler)(nil)

func (s *scaler) HandleDesiredRunnerCount(_ context.Context, count int) (int, error) {
	now := time.Now()
	s.ln.mu.Lock()
	changed := !s.ln.known || s.ln.assigned != count
	s.ln.assigned, s.ln.known, s.ln.lastMessage = count, true, now
	s.ln.mu.Unlock()
	assignedJobs.WithLabelValues(s.pool.String()).Set(float64(count))
	lastMessage.WithLabelValues(s.pool.String()).Set(float64(now.Unix()))
	if changed {
		s.l.wake(s.pool)
	}
	return count, nil
}

func (s *scaler) HandleJobStarted(context.Context, *ghscaleset.JobStarted) error {
	// The runner that took it is busy from now: the pool looks again, and
	// its runner reconciler keeps it (GitHub refuses to remove a busy one).
	s.l.wake(s.pool)
	return nil
}

func (s *scaler) HandleJobCompleted(context.Context, *ghscaleset.JobCompleted) error {
	// A completed job's runner may go; the pool's look at GitHub decides,
	// since GitHub is known to send JobCompleted while the job still runs.
	s.l.wake(s.pool)
	return nil
}
