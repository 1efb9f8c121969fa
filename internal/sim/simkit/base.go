package simkit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Options configure a Base.
type Options struct {
	// Name starts every error the kit returns ("proxmoxsim: server is
	// closed"), so a caller sees which simulator failed.
	Name string
	// ErrorLog receives the HTTP server's own errors, such as refused TLS
	// handshakes; nil discards them.
	ErrorLog *log.Logger
}

// ServeConfig says how Serve exposes the handler.
type ServeConfig struct {
	// TLS, when set, serves HTTPS with this configuration; nil serves plain HTTP.
	TLS *tls.Config
	// Path is appended to the scheme and host to form URL, e.g. "/api2/json"
	// or "/".
	Path string
}

// Base is a simulator's lifetime: the listener, timers for simulated work,
// injected delays and hung requests, and the background workers, all ended
// by Close.
//
// Timers run their work with the simulator's own state lock held (the
// sync.Locker given to New), as every other change of the simulated world
// does. Base's own lock is taken after that one, never before it, so a
// simulator may call any method while it holds its state lock, except Close.
type Base struct {
	opts  Options
	state sync.Locker

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc

	timers    map[uint64]*time.Timer
	nextTimer uint64
	timerWG   sync.WaitGroup
	handlerWG sync.WaitGroup
	workerWG  sync.WaitGroup

	srv       *http.Server
	serveDone chan struct{}
	url       string
}

// New returns a Base that runs scheduled work with state locked.
func New(opts Options, state sync.Locker) *Base {
	ctx, cancel := context.WithCancel(context.Background())
	return &Base{
		opts:    opts,
		state:   state,
		closing: make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
		timers:  map[uint64]*time.Timer{},
	}
}

func (b *Base) errorf(format string, args ...any) error {
	return fmt.Errorf(b.opts.Name+": "+format, args...)
}

// Serve listens on addr (host:port) and serves h there until Close. An
// unspecified host (":8081", "0.0.0.0:0") is reached through 127.0.0.1 in
// URL. HTTP/2 is off: both simulated APIs are HTTP/1.1 servers, and fault
// answers hijack the connection.
func (b *Base) Serve(addr string, h http.Handler, cfg ServeConfig) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New(b.opts.Name + ": server is closed")
	}
	if b.srv != nil {
		return errors.New(b.opts.Name + ": server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return b.errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		// A non-nil empty map disables HTTP/2 and keeps connections hijackable.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ErrorLog:     b.opts.ErrorLog,
	}
	if srv.ErrorLog == nil {
		srv.ErrorLog = log.New(io.Discard, "", 0)
	}
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
		ln = tls.NewListener(ln, cfg.TLS)
	}
	host := ln.Addr().String()
	if h, port, err := net.SplitHostPort(host); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
		host = net.JoinHostPort("127.0.0.1", port)
	}
	b.srv = srv
	b.url = scheme + host + cfg.Path
	b.serveDone = make(chan struct{})
	done := b.serveDone
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return nil
}

// URL is where Serve listens: scheme, host and ServeConfig.Path. It is
// empty before Serve.
func (b *Base) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.url
}

// Close stops listening, ends hung and delayed requests, stops every
// pending timer, cancels Context and waits until every request handler,
// timer and worker has returned. It is safe to call more than once. The
// caller must not hold the state lock: a timer may be waiting for it.
func (b *Base) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	close(b.closing)
	b.cancel()
	for id, t := range b.timers {
		if t.Stop() {
			b.timerWG.Done()
		}
		delete(b.timers, id)
	}
	srv, done := b.srv, b.serveDone
	b.mu.Unlock()

	if srv != nil {
		_ = srv.Close()
		<-done
	}
	b.handlerWG.Wait()
	b.timerWG.Wait()
	b.workerWG.Wait()
}

// Closed reports whether Close has begun.
func (b *Base) Closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Closing is closed when Close begins, to release whatever waits on the
// simulated world.
func (b *Base) Closing() <-chan struct{} { return b.closing }

// Context ends when Close begins; outgoing calls a simulator makes (webhook
// deliveries) use it.
func (b *Base) Context() context.Context { return b.ctx }

// Enter admits a request handler, so Close waits for it. It reports false
// once the Base is closed: the handler must answer at once and not call
// Leave.
func (b *Base) Enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.handlerWG.Add(1)
	return true
}

// Leave ends a handler that Enter admitted.
func (b *Base) Leave() { b.handlerWG.Done() }

// Go runs a background worker that Close waits for; the worker must return
// once Closing is closed. It does nothing after Close.
func (b *Base) Go(worker func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.workerWG.Add(1)
	go func() {
		defer b.workerWG.Done()
		worker()
	}()
}

// After runs work with the state lock held once d has passed, unless Close
// comes first. Simulated tasks (a clone, a job) finish this way.
func (b *Base) After(d time.Duration, work func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.nextTimer++
	id := b.nextTimer
	b.timerWG.Add(1)
	b.timers[id] = time.AfterFunc(max(d, 0), func() {
		defer b.timerWG.Done()
		b.state.Lock()
		defer b.state.Unlock()
		if !b.claim(id) {
			return
		}
		work()
	})
}

// claim removes timer id and reports whether its work should still run:
// Close stops and removes every timer.
func (b *Base) claim(id uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.timers[id]; !ok {
		return false
	}
	delete(b.timers, id)
	return !b.closed
}

// Sleep holds a request for d, an injected delay or the API's latency. It
// reports whether the full delay passed: false when the client gave up
// (ctx) or the server closed first.
func (b *Base) Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-b.closing:
		return false
	}
}

// Hang holds a request that never gets an answer until its client gives up
// (ctx) or the server closes.
func (b *Base) Hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-b.closing:
	}
}
