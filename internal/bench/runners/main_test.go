package runners

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/bench/runnerlab"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

const repo = runnerlab.Repo

// deliveryConcurrency is how many deliveries githubsim has in flight at
// once. One at a time, each answered only once the receiver recorded its
// job, 100 deliveries took 17.6 s to send and 500 took 47 s (make
// bench-runners): the burst measured the sender, not the operator.
const deliveryConcurrency = 16

var (
	lab *runnerlab.Lab
	gh  *githubsim.Server
	// creates records the operator's VirtualMachine creations.
	creates = &createLog{resource: "/virtualmachines"}
	// claims records the operator's MachineClaim creations: where the pool's
	// part of the latency ends and the MachineClaim reconciler's begins.
	claims = &createLog{resource: "/machineclaims"}
)

// The runner lab (internal/bench/runnerlab): the manager with production
// settings (the runner pools' sync interval, timeouts and workers at their
// defaults) and its webhook receiver, kubevirtsim, githubsim delivering to
// the receiver, and stand-in agents. The manager's transport is wrapped to
// timestamp its VirtualMachine creations. The budget is GitHub's for an App
// installation on an enterprise organization: the burst is not throttled
// by the simulator. githubsim sends deliveryConcurrency deliveries at once,
// as GitHub does not wait for one answer before the next.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		l, stop, err := runnerlab.Start(context.Background(), runnerlab.Options{
			Config: testenv.Config(), Client: testenv.Client(), WebhookSecret: "bench-s3cret",
			RateLimit: 15000, DeliveryConcurrency: deliveryConcurrency,
			Wrap: func(rt http.RoundTripper) http.RoundTripper { return claims.wrap(creates.wrap(rt)) },
		})
		if err != nil {
			return nil, err
		}
		lab, gh = l, l.GitHub
		return stop, nil
	})
}

// createLog timestamps each POST of a resource (its path's last segment)
// the operator sends, as it leaves the operator, by namespace/name; only
// the creations the API server accepted are kept. For VirtualMachines it
// is the KubeVirt provider's Create call.
type createLog struct {
	resource string
	mu       sync.Mutex
	at       map[string]time.Time
}

func (l *createLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, l.resource) {
			return rt.RoundTrip(r)
		}
		at := time.Now()
		res, err := rt.RoundTrip(r)
		if err != nil || res.StatusCode != http.StatusCreated {
			return res, err
		}
		// The name is in the answer; the operator reads it afterwards.
		raw, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(raw))
		if err != nil {
			return res, nil
		}
		if key, ok := vmKey(raw); ok {
			l.mu.Lock()
			if l.at == nil {
				l.at = map[string]time.Time{}
			}
			l.at[key] = at
			l.mu.Unlock()
		}
		return res, nil
	})
}

// in returns the creations in namespace ns, by VM name.
func (l *createLog) in(ns string) map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]time.Time{}
	for k, t := range l.at {
		if n, name, _ := strings.Cut(k, "/"); n == ns {
			out[name] = t
		}
	}
	return out
}

// vmKey reads namespace/name from the object the API server answered a
// POST with.
func vmKey(raw []byte) (string, bool) {
	var vm struct {
		Metadata struct{ Name, Namespace string } `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &vm); err != nil || vm.Metadata.Name == "" {
		return "", false
	}
	return vm.Metadata.Namespace + "/" + vm.Metadata.Name, true
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
