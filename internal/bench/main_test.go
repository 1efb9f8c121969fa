package bench

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/kustomize/admission"
)

// apiRequests counts every request the manager sends to the API server, so a
// benchmark can say what a claim costs the control plane.
var apiRequests = &requestCounter{}

// One manager, configured as in production, runs against the package's
// control plane for every benchmark; each benchmark has its own namespace and
// its own simulator.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		// As kustomize/ installs it: the API server stores each new claim
		// with its finalizer.
		if err := admission.Install(context.Background(), testenv.Client()); err != nil {
			return nil, err
		}
		cfg := testenv.Config()
		// config.GetConfig, which the production binary uses, turns client-side
		// rate limiting off (QPS -1) and leaves throttling to the API server's
		// priority and fairness; envtest's config would cap it at 1000 QPS.
		cfg.QPS = -1
		cfg.UserAgent = "hyperfleet/bench"
		cfg.Wrap(apiRequests.wrap)
		// The production defaults of the flags in manager.Options.BindFlags,
		// except for what a test process cannot have (ports, a Lease).
		opts := manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", LeaderElect: false, OperatorNamespace: "hyperfleet-system",
			ObserveInterval: 30 * time.Second, FinalizationTimeout: 10 * time.Minute,
			OrphanSweepInterval: time.Minute, OrphanGrace: 10 * time.Minute,
		}
		mgr, err := manager.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		return testenv.StartManager(mgr), nil
	})
}

// requestCounter counts API-server requests by verb and resource.
type requestCounter struct {
	mu     sync.Mutex
	counts map[requestKind]int
}

// requestKind is the Kubernetes verb of a request and the resource (with
// its subresource, e.g. machineclaims/status) it is on.
type requestKind struct{ verb, resource string }

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return countingTransport{counter: c, base: rt}
}

func (c *requestCounter) add(k requestKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[requestKind]int{}
	}
	c.counts[k]++
}

// reset zeroes the counts.
func (c *requestCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[requestKind]int{}
}

// snapshot returns a copy of the counts.
func (c *requestCounter) snapshot() map[requestKind]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// byVerb sums counts per verb.
func byVerb(counts map[requestKind]int) map[string]int {
	out := map[string]int{}
	for k, n := range counts {
		out[k.verb] += n
	}
	return out
}

// total sums all counts.
func total[K comparable](counts map[K]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// sortedKeys returns m's keys, largest count first.
func sortedKeys[K comparable](m map[K]int, less func(a, b K) int) []K {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b K) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return less(a, b)
	})
	return keys
}

// countingTransport counts each request before passing it on. Every request
// is one round trip, whatever its answer: a long-running watch counts once,
// when it is opened.
type countingTransport struct {
	counter *requestCounter
	base    http.RoundTripper
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.counter.add(classify(r))
	return t.base.RoundTrip(r)
}

// classify names a request the way the API server's audit log does: get,
// list or watch for GETs (by whether a name is given and ?watch is set),
// create, update, patch, delete or deletecollection otherwise. Requests
// outside a resource (discovery, /version, /openapi) are "discovery".
func classify(r *http.Request) requestKind {
	segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(segs) > 2 && segs[0] == "api": // /api/v1/...
		rest = segs[2:]
	case len(segs) > 3 && segs[0] == "apis": // /apis/group/version/...
		rest = segs[3:]
	default:
		return requestKind{verb: "discovery", resource: r.URL.Path}
	}
	if len(rest) > 2 && rest[0] == "namespaces" { // a namespaced resource
		rest = rest[2:]
	}
	resource, named := rest[0], len(rest) > 1
	if len(rest) > 2 {
		resource += "/" + strings.Join(rest[2:], "/")
	}
	verb := strings.ToLower(r.Method)
	switch r.Method {
	case http.MethodGet:
		switch w := r.URL.Query().Get("watch"); {
		case w == "true" || w == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodDelete:
		if !named {
			verb = "deletecollection"
		}
	}
	return requestKind{verb: verb, resource: resource}
}
