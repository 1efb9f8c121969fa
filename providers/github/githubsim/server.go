package githubsim

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// enterprisePrefix is where an Enterprise Server serves the REST API; the
// simulator answers both there and at the root, as api.github.com does.
const enterprisePrefix = "/api/v3"

// Server is a simulated GitHub reachable over HTTP. Create it with New, start
// it with Start or StartOn, and stop it with Close.
type Server struct {
	opts  Options
	clock clock.PassiveClock
	api   *http.ServeMux
	sim   *http.ServeMux

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	// ctx ends when the server closes; outgoing webhook deliveries use it.
	ctx    context.Context
	cancel context.CancelFunc

	// credentials
	appKeys     []*rsa.PublicKey // keys the App's JWT may be signed with
	appKeyPEM   []byte           // the newest private key
	instTokens  map[string]time.Time
	pats        map[string]bool
	regTokens   map[string]regToken
	jobDuration time.Duration

	// the world
	orgs      map[string]*orgState  // by lower-case login
	repos     map[string]*repoState // by lower-case full name
	nextID    int64                 // for orgs, repos, groups, labels
	labelIDs  map[string]int64
	runners   map[int64]*runnerState
	nextRun   int64
	jobs      map[int64]*jobState
	jobOrder  []int64
	nextJobID int64
	nextRunID int64

	// webhooks
	webhookURL    string
	webhookSecret string
	deliveries    []*Delivery
	queue         []*Delivery
	wake          chan struct{}
	dropNext      int
	nextDelivery  int64

	// rate limits, faults and bookkeeping
	rateLimit int
	budgets   map[string]*simBudget
	faults    []*faultState
	stats     map[string]int
	requests  []Request

	timers    map[uint64]*time.Timer
	nextTimer uint64
	timerWG   sync.WaitGroup
	handlerWG sync.WaitGroup
	workerWG  sync.WaitGroup

	httpSrv   *http.Server
	serveDone chan struct{}
	baseURL   string
}

// New builds a simulated GitHub from opts (see Options for the defaults). It
// does not listen yet: call Start or StartOn, or mount Handler yourself. It
// panics only if the system's random source fails.
func New(opts Options) *Server {
	o := opts.withDefaults()
	key := o.AppKey
	if key == nil {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			panic(fmt.Sprintf("githubsim: generating the App key: %v", err))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		ctx:           ctx,
		cancel:        cancel,
		opts:          o,
		clock:         o.Clock,
		closing:       make(chan struct{}),
		appKeys:       []*rsa.PublicKey{&key.PublicKey},
		appKeyPEM:     encodeKey(key),
		instTokens:    map[string]time.Time{},
		pats:          map[string]bool{},
		regTokens:     map[string]regToken{},
		jobDuration:   o.JobDuration,
		orgs:          map[string]*orgState{},
		repos:         map[string]*repoState{},
		nextID:        100,
		labelIDs:      map[string]int64{},
		runners:       map[int64]*runnerState{},
		nextRun:       1,
		jobs:          map[int64]*jobState{},
		nextJobID:     9000000001,
		nextRunID:     7000000001,
		webhookURL:    o.WebhookURL,
		webhookSecret: o.WebhookSecret,
		wake:          make(chan struct{}, 1),
		rateLimit:     o.RateLimit,
		budgets:       map[string]*simBudget{},
		stats:         map[string]int{},
		timers:        map[uint64]*time.Timer{},
	}
	s.pats["ghp_"+randomAlnum(36)] = true
	for _, t := range o.PersonalAccessTokens {
		s.pats[t] = true
	}
	for _, org := range o.Organizations {
		s.addOrgLocked(org)
	}
	for _, full := range o.Repositories {
		if err := s.addRepoLocked(full); err != nil {
			panic(fmt.Sprintf("githubsim: %v", err))
		}
	}
	s.api = s.apiRoutes()
	s.sim = s.simRoutes()
	s.workerWG.Add(1)
	go s.deliveryWorker()
	return s
}

// Start serves on 127.0.0.1 with a random port.
func (s *Server) Start() error { return s.StartOn("127.0.0.1:0") }

// StartOn serves plain HTTP on addr (host:port), e.g. ":8081" for the
// developer sandbox.
func (s *Server) StartOn(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("githubsim: server is closed")
	}
	if s.httpSrv != nil {
		return errors.New("githubsim: server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("githubsim: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second, ErrorLog: s.opts.ErrorLog}
	if srv.ErrorLog == nil {
		srv.ErrorLog = log.New(io.Discard, "", 0)
	}
	host := ln.Addr().String()
	if h, port, err := net.SplitHostPort(host); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
		host = net.JoinHostPort("127.0.0.1", port)
	}
	s.httpSrv = srv
	s.baseURL = "http://" + host + "/"
	s.serveDone = make(chan struct{})
	done := s.serveDone
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return nil
}

// URL is the server's root with a trailing slash, e.g.
// http://127.0.0.1:41234/. The REST API answers there (as api.github.com)
// and under api/v3/ (as an Enterprise Server); runners register with
// URL()+"owner/repo". It is empty before Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.baseURL
}

// Handler returns the server as an http.Handler, for callers that serve it
// themselves.
func (s *Server) Handler() http.Handler { return s }

// Close stops listening, ends waiting requests, stops every timer and the
// webhook worker, and waits until no goroutine of the simulator is left. It
// is safe to call more than once.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.closing)
	s.cancel()
	for id, t := range s.timers {
		if t.Stop() {
			s.timerWG.Done()
		}
		delete(s.timers, id)
	}
	srv, done := s.httpSrv, s.serveDone
	s.mu.Unlock()

	if srv != nil {
		_ = srv.Close()
		<-done
	}
	s.handlerWG.Wait()
	s.timerWG.Wait()
	s.workerWG.Wait()
}

// ServeHTTP routes /_sim/ to the simulator's control endpoints and
// everything else, with or without /api/v3, to the REST API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "githubsim: closed", http.StatusServiceUnavailable)
		return
	}
	s.handlerWG.Add(1)
	s.mu.Unlock()
	defer s.handlerWG.Done()

	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		s.sim.ServeHTTP(w, r)
		return
	}
	r.Header.Del(prefixHeader) // only ServeHTTP sets it
	if rest, ok := strings.CutPrefix(r.URL.Path, enterprisePrefix); ok && (rest == "" || rest[0] == '/') {
		r2 := r.Clone(r.Context())
		r2.URL.Path = rest
		r2.URL.RawPath = ""
		if r2.URL.Path == "" {
			r2.URL.Path = "/"
		}
		r2.Header.Set(prefixHeader, enterprisePrefix)
		r = r2
	}
	s.api.ServeHTTP(w, r)
}

// prefixHeader carries the stripped /api/v3 to the request log; it is set
// by ServeHTTP only, never read from the client.
const prefixHeader = "X-Githubsim-Prefix"

// schedule runs fn with s.mu held after d, unless the server closes first.
// The caller must hold s.mu.
func (s *Server) schedule(d time.Duration, fn func()) {
	if s.closed {
		return
	}
	s.nextTimer++
	id := s.nextTimer
	s.timerWG.Add(1)
	s.timers[id] = time.AfterFunc(max(d, 0), func() {
		defer s.timerWG.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.timers[id]; !ok {
			return // stopped by Close
		}
		delete(s.timers, id)
		if !s.closed {
			fn()
		}
	})
}

// sleep waits for d unless the request's client gives up or the server
// closes; it reports whether the full delay passed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}

// ---------------------------------------------------------------------------
// answers

// apiError is an error answer in GitHub's shape.
type apiError struct {
	status     int
	message    string
	docURL     string
	retryAfter time.Duration
	header     http.Header
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.message) }

// StatusCode is the HTTP status GitHub would answer with.
func (e *apiError) StatusCode() int { return e.status }

func errf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, message: fmt.Sprintf(format, args...)}
}

const docsRoot = "https://docs.github.com/rest"

func notFound() *apiError {
	return &apiError{status: http.StatusNotFound, message: "Not Found", docURL: docsRoot}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, errf(http.StatusInternalServerError, "githubsim: encoding the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError sends e as GitHub does: {"message", "documentation_url", "status"}.
func writeError(w http.ResponseWriter, e *apiError) {
	for k, vs := range e.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.retryAfter+time.Second-1)/time.Second), 10))
	}
	doc := e.docURL
	if doc == "" {
		doc = docsRoot
	}
	writeJSON(w, e.status, map[string]string{"message": e.message, "documentation_url": doc, "status": strconv.Itoa(e.status)})
}

// ---------------------------------------------------------------------------
// identifiers

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("githubsim: reading random bytes: %v", err))
	}
	return b
}

const alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomAlnum returns n random characters from alphabet (default A-Za-z0-9).
func randomAlnum(n int, alphabet ...string) string {
	chars := alnum
	if len(alphabet) > 0 {
		chars = alphabet[0]
	}
	b := randomBytes(n)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b)
}

func randomUUID() string {
	b := randomBytes(16)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
