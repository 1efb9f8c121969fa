package testenv

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Runnable is what a Process runs: a controller-runtime manager.
type Runnable interface {
	Start(ctx context.Context) error
}

// Process is one operator process run in the test's own process, so a test
// can kill it as the kernel would: its API calls go through a transport
// that fails every request once it is killed (a dead process sends
// nothing), so no write of a killed instance lands afterwards, and a Lease
// it held stays held until it expires.
type Process struct {
	dead   atomic.Bool
	cancel context.CancelFunc
	done   chan error
}

// StartProcess builds the process's manager from the test API server's
// config, wrapped so the process can be killed, and starts it.
func StartProcess(build func(cfg *rest.Config) (Runnable, error)) (*Process, error) {
	p := &Process{done: make(chan error, 1)}
	cfg := Config()
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return killable{dead: &p.dead, base: rt} }
	m, err := build(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() { p.done <- m.Start(ctx) }()
	return p, nil
}

// Kill makes the process go silent at once, holding whatever Lease it has
// until the Lease expires; then reaps it.
func (p *Process) Kill() {
	p.dead.Store(true)
	p.wait()
}

// Stop ends the process as a SIGTERM does: it releases its Lease, so a
// standby takes over at its next try.
func (p *Process) Stop() { p.wait() }

func (p *Process) wait() {
	p.cancel()
	select {
	case err := <-p.done:
		_ = err // a killed process's error (its API calls fail) is expected
	case <-time.After(time.Minute):
	}
}

// killable fails every request once dead is set.
type killable struct {
	dead *atomic.Bool
	base http.RoundTripper
}

func (k killable) RoundTrip(r *http.Request) (*http.Response, error) {
	if k.dead.Load() {
		return nil, errors.New("process killed")
	}
	return k.base.RoundTrip(r)
}
