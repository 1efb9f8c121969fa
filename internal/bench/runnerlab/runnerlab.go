// Package runnerlab is what the runner benchmarks (internal/bench/runners,
// internal/bench/githubcost) and the RunnerPool suites
// (reconcilers/runnerpool, its poolprops) run against: one manager with its
// webhook receiver (with the production defaults of its runner flags unless
// Options.Manager shortens them), one kubevirtsim, one githubsim delivering
// signed webhooks to the receiver, and stand-in agents
// (internal/sim/runnersim) that register each runner once its VM is up and
// power it off after its job.
package runnerlab

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/bench/proc"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
)

const (
	// OperatorNamespace holds the webhook Secret.
	OperatorNamespace = "hyperfleet-system"
	// Repo is the one repository githubsim serves.
	Repo = "acme/widgets"
	// webhookSecretName is the Secret the receiver checks signatures with.
	webhookSecretName = "github-webhook"
	// syncInterval is --runner-sync-interval's default
	// (manager.RunnerOptions.bindFlags).
	syncInterval = 15 * time.Second
)

// Options shape the lab.
type Options struct {
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Client is the benchmark's own client.
	Client client.Client
	// WebhookSecret signs githubsim's deliveries.
	WebhookSecret string
	// RateLimit is githubsim's hourly budget per credential.
	RateLimit int
	// JobDuration is how long a job runs once a runner takes it; 0 is
	// githubsim's default.
	JobDuration time.Duration
	// DeliveryConcurrency is how many webhook deliveries githubsim has in
	// flight at once, as GitHub does; 0 is githubsim's default (one at a
	// time).
	DeliveryConcurrency int
	// MessagePollWait is how long githubsim holds a scale set's message
	// poll open; 0 is GitHub's 50 s.
	MessagePollWait time.Duration
	// Wrap, if set, wraps the manager's transport to the API server (to
	// timestamp its requests).
	Wrap func(http.RoundTripper) http.RoundTripper
	// Manager, if set, changes the manager's options before it is built:
	// the suites shorten its intervals and give the pools their clock.
	Manager func(*manager.Options)
	// Agents, if set, changes the stand-in agents before they start (how
	// a guest powers off, finds its user data, runs its agent); the rest of
	// the lab is up.
	Agents func(*Lab, *runnersim.Agents)
}

// Lab is a running lab.
type Lab struct {
	GitHub   *githubsim.Server
	KubeVirt *kubevirtsim.Simulator
	// WebhookURL is the manager's webhook receiver.
	WebhookURL string

	ctx    context.Context
	opts   manager.Options
	cfg    *rest.Config
	mgr    *running
	agents *runnersim.Agents
}

// Agents are the lab's stand-in machines (their errors, for a benchmark
// to stop on).
func (l *Lab) Agents() *runnersim.Agents { return l.agents }

// Start runs the lab until Stop.
func Start(ctx context.Context, o Options) (_ *Lab, stop func(), err error) {
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(ctx)
	var stops []func()
	stopAll := func() {
		cancel()
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	if err := kubevirtsim.Install(ctx, o.Config); err != nil {
		return nil, nil, err
	}
	kv, err := kubevirtsim.Start(ctx, o.Config, kubevirtsim.Options{Logger: logr.Discard()})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, kv.Stop)
	addr, err := proc.FreeAddress()
	if err != nil {
		return nil, nil, err
	}
	gh := githubsim.New(githubsim.Options{Repositories: []string{Repo}, WebhookURL: "http://" + addr + "/github/webhook",
		WebhookSecret: o.WebhookSecret, JobDuration: o.JobDuration, RateLimit: o.RateLimit, DeliveryConcurrency: o.DeliveryConcurrency,
		MessagePollWait: o.MessagePollWait})
	if err := gh.Start(); err != nil {
		return nil, nil, err
	}
	stops = append(stops, gh.Close)
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: webhookSecretName, Namespace: OperatorNamespace, Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"webhookSecret": o.WebhookSecret},
		},
	} {
		if err := o.Client.Create(ctx, obj); err != nil {
			return nil, nil, err
		}
	}
	cfg := rest.CopyConfig(o.Config)
	if o.Wrap != nil {
		cfg.Wrap(o.Wrap)
	}
	// manager.New gives every path the production client settings.
	opts := manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: OperatorNamespace,
		ObserveInterval: 30 * time.Second, FinalizationTimeout: 10 * time.Minute,
		OrphanSweepInterval: time.Minute, OrphanGrace: 10 * time.Minute,
		// A pool's runners are MachineClaims on a cluster through a
		// template: those reconcilers, and nothing else, run beside it.
		Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
			manager.ControllerMachineClaim, manager.ControllerRunnerPool},
		Runners: manager.RunnerOptions{WebhookAddr: addr, WebhookSecret: webhookSecretName, SyncInterval: syncInterval},
		// StartManager may build a second manager in this process.
		SkipControllerNameValidation: true,
	}
	if o.Manager != nil {
		o.Manager(&opts)
	}
	l := &Lab{GitHub: gh, KubeVirt: kv, WebhookURL: "http://" + addr + "/github/webhook", ctx: ctx, opts: opts, cfg: cfg}
	if err := l.StartManager(); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() {
		if err := l.StopManager(); err != nil {
			fmt.Fprintf(os.Stderr, "runnerlab: manager: %v\n", err)
		}
	})
	claims, err := claimCache(ctx, o.Config, o.Client.Scheme())
	if err != nil {
		return nil, nil, err
	}
	agents := &runnersim.Agents{Client: o.Client, Claims: claims, GitHub: gh, Log: logr.Discard(),
		PowerOff: func(_ context.Context, claim *hypervisorv1alpha1.MachineClaim) error {
			return kv.GuestShutdown(claim.Namespace, claim.Status.MachineName)
		}}
	if o.Agents != nil {
		o.Agents(l, agents)
	}
	l.agents = agents
	agents.Start(ctx)
	// Waited for first (stops run last first, after the cancel): every
	// agent's process has exited before the manager and the simulators it
	// talks to stop.
	stops = append(stops, agents.Wait)
	return l, stopAll, nil
}

// Suite is the manager of the RunnerPool suites: machines observed every
// second, a deleted pool's cleanup bounded by a minute, pools re-reading
// GitHub every second, and their timeouts told by clk, which a test steps
// instead of waiting a timeout out. Give it as Options.Manager.
func Suite(clk clock.Clock) func(*manager.Options) {
	return func(o *manager.Options) {
		o.ObserveInterval, o.FinalizationTimeout = time.Second, time.Minute
		o.Runners.SyncInterval, o.Runners.GitHubTimeout, o.Runners.Clock = time.Second, 5*time.Second, clk
		// A scale set held elsewhere is asked for again within seconds.
		o.Runners.ScaleSetSession = scaleset.SessionPolicy{Window: 20 * time.Second, FirstBackoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second}
		o.Runners.ScaleSetRetry = 500 * time.Millisecond
	}
}

// running is one run of the manager.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// StartManager starts the lab's manager: once by Start, and again after
// StopManager, on the same receiver address, as an operator restarted
// remembering nothing of its previous run.
func (l *Lab) StartManager() error {
	mgr, err := manager.New(l.cfg, l.opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(l.ctx)
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- mgr.Start(ctx) }()
	l.mgr = r
	return nil
}

// StopManager stops the manager and waits for it: its receiver has stopped
// listening, so deliveries meanwhile fail as with an operator that is down.
// It returns the error the manager ended with.
func (l *Lab) StopManager() error {
	r := l.mgr
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// claimCache is an informer's cache of MachineClaims, synced, for the
// stand-in machines to look in (runnersim.Agents.Claims): a watch in place
// of a LIST of every claim five times a second, which on two cores took
// API server CPU from the operator being measured. It stops with ctx.
func claimCache(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (client.Reader, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&hypervisorv1alpha1.MachineClaim{}: {},
	}})
	if err != nil {
		return nil, err
	}
	if _, err := c.GetInformer(ctx, &hypervisorv1alpha1.MachineClaim{}); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the stand-in machines' cache of MachineClaims did not sync")
	}
	return c, nil
}
