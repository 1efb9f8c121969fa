package githubsim

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// enterprisePrefix is where an Enterprise Server serves the REST API; the
// simulator answers both there and at the root, as api.github.com does.
const enterprisePrefix = "/api/v3"

// Server is a simulated GitHub reachable over HTTP. Create it with New, start
// it with Start or StartOn, and stop it with Close.
type Server struct {
	opts    Options
	clock   clock.PassiveClock
	api     *http.ServeMux
	sim     *http.ServeMux
	actions *http.ServeMux // the scale-set API's Actions service

	// kit runs the server's lifetime: listener, timers, delays, the webhook
	// worker, Close.
	kit    *simkit.Base
	faults *simkit.Faults[Fault]

	mu sync.Mutex

	// credentials
	appKeys     []*rsa.PublicKey // keys the App's JWT may be signed with
	appKeyPEM   []byte           // the newest private key
	instTokens  map[string]time.Time
	pats        map[string]bool
	regTokens   map[string]regToken
	regTokenSeq int64
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

	// the scale-set API
	scaleSets    map[int]*scaleSetState
	nextScaleSet int
	adminKey     []byte // signs the Actions service admin tokens

	// webhooks
	webhookURL    string
	webhookSecret string
	deliveries    []*Delivery
	queue         []*Delivery
	wake          chan struct{}
	dropNext      int
	nextDelivery  int64

	// rate limits and bookkeeping
	rateLimit int
	budgets   map[string]*simBudget
	stats     map[string]int
	requests  []Request
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
	s := &Server{
		opts:          o,
		clock:         o.Clock,
		faults:        simkit.NewFaults[Fault]("githubsim"),
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
		scaleSets:     map[int]*scaleSetState{},
		nextScaleSet:  1,
		adminKey:      randomBytes(32),
	}
	s.kit = simkit.New(simkit.Options{Name: "githubsim", ErrorLog: o.ErrorLog}, &s.mu)
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
	s.actions = s.actionsRoutes()
	// The workers share one client, keeping a connection per worker.
	client := &http.Client{Timeout: o.WebhookTimeout, Transport: deliveryTransport(o.DeliveryConcurrency)}
	for range o.DeliveryConcurrency {
		s.kit.Go(func() { s.deliveryWorker(client) })
	}
	return s
}

// Start serves on 127.0.0.1 with a random port.
func (s *Server) Start() error { return s.StartOn("127.0.0.1:0") }

// StartOn serves plain HTTP on addr (host:port), e.g. ":8081" for the
// developer sandbox.
func (s *Server) StartOn(addr string) error {
	return s.kit.Serve(addr, s, simkit.ServeConfig{Path: "/"})
}

// URL is the server's root with a trailing slash, e.g.
// http://127.0.0.1:41234/. The REST API answers there (as api.github.com)
// and under api/v3/ (as an Enterprise Server); runners register with
// URL()+"owner/repo". It is empty before Start.
func (s *Server) URL() string { return s.kit.URL() }

// Handler returns the server as an http.Handler, for callers that serve it
// themselves.
func (s *Server) Handler() http.Handler { return s }

// Close stops listening, ends waiting requests, stops every timer and the
// webhook worker, and waits until no goroutine of the simulator is left. It
// is safe to call more than once.
func (s *Server) Close() { s.kit.Close() }

// ServeHTTP routes /_sim/ to the simulator's control endpoints and
// everything else, with or without /api/v3, to the REST API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.kit.Enter() {
		http.Error(w, "githubsim: closed", http.StatusServiceUnavailable)
		return
	}
	defer s.kit.Leave()

	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		s.sim.ServeHTTP(w, r)
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, actionsPrefix+"/"); ok {
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = "/"+rest, ""
		s.actions.ServeHTTP(w, r2)
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

// ---------------------------------------------------------------------------
// answers

// apiError is an error answer in GitHub's shape.
type apiError struct {
	status     int
	message    string
	docURL     string
	retryAfter time.Duration
	header     http.Header
	// actionsType is the .NET exception's type name of an Actions service
	// error (actionsError); empty for a REST API error.
	actionsType string
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
	if e.actionsType != "" {
		// The Actions service's shape: {"$id", "innerException",
		// "message", "typeName", "typeKey", "errorCode", "eventId"}.
		short := e.actionsType[strings.LastIndex(e.actionsType, ".")+1:]
		writeJSON(w, e.status, map[string]any{"$id": "1", "innerException": nil, "message": e.message,
			"typeName": e.actionsType + ", GitHub.DistributedTask.WebApi", "typeKey": short, "errorCode": 0, "eventId": 3000})
		return
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
