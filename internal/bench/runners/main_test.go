package runners

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/github/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt/kubevirtsim"
)

const (
	operatorNamespace = "hyperfleet-system"
	webhookSecret     = "bench-s3cret"
	repo              = "acme/widgets"
)

var (
	kv *kubevirtsim.Simulator
	gh *githubsim.Server
	// creates records the operator's VirtualMachine creations.
	creates = &createLog{}
)

// One manager with production settings (the runner pools' sync interval,
// timeouts and workers at their defaults) and its webhook receiver, one
// kubevirtsim, one githubsim delivering to the receiver, and stand-in
// agents that register each runner once its VM is up.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		ctx, cancel := context.WithCancel(context.Background())
		fail := func(err error) (func(), error) { cancel(); return nil, err }
		if err := kubevirtsim.Install(ctx, testenv.Config()); err != nil {
			return fail(err)
		}
		var err error
		if kv, err = kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()}); err != nil {
			return fail(err)
		}
		addr, err := freeAddr()
		if err != nil {
			return fail(err)
		}
		// GitHub's budget for an App installation on an enterprise
		// organization: the burst is not throttled by the simulator.
		gh = githubsim.New(githubsim.Options{Repositories: []string{repo}, WebhookURL: "http://" + addr + "/github/webhook",
			WebhookSecret: webhookSecret, RateLimit: 15000})
		if err := gh.Start(); err != nil {
			return fail(err)
		}
		c := testenv.Client()
		for _, obj := range []client.Object{
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}},
			&corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "github-webhook", Namespace: operatorNamespace, Labels: map[string]string{meta.CredentialsLabel: "true"}},
				StringData: map[string]string{"webhookSecret": webhookSecret},
			},
		} {
			if err := c.Create(ctx, obj); err != nil {
				return fail(err)
			}
		}
		cfg := testenv.Config()
		// As the production binary: no client-side throttling (see
		// internal/bench's TestMain).
		cfg.QPS = -1
		cfg.Wrap(creates.wrap)
		mgr, err := manager.New(cfg, manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: operatorNamespace,
			ObserveInterval: 30 * time.Second, FinalizationTimeout: 10 * time.Minute,
			OrphanSweepInterval: time.Minute, OrphanGrace: 10 * time.Minute,
			Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
				manager.ControllerMachineClaim, manager.ControllerRunnerPool},
			Runners: manager.RunnerOptions{WebhookAddr: addr, WebhookSecret: "github-webhook", SyncInterval: 15 * time.Second},
		})
		if err != nil {
			return fail(err)
		}
		stopManager := testenv.StartManager(mgr)
		agents := &runnersim.Agents{Client: c, GitHub: gh, Log: logr.Discard(),
			PowerOff: func(_ context.Context, claim *hypervisorv1alpha1.MachineClaim) error {
				return kv.GuestShutdown(claim.Namespace, claim.Status.MachineName)
			}}
		agents.Start(ctx)
		return func() {
			cancel()
			stopManager()
			gh.Close()
			kv.Stop()
		}, nil
	})
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// createLog timestamps each VirtualMachine POST the operator sends (the
// KubeVirt provider's Create call), as it leaves the operator, by
// namespace/name; only the creations the API server accepted are kept.
type createLog struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (l *createLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/virtualmachines") {
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

// vmKey reads namespace/name from the VirtualMachine the API server
// answered a POST with.
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
