// Package runnerlab is what the runner benchmarks (internal/bench/runners,
// internal/bench/githubcost) run against: one manager with the production
// defaults of its runner flags and its webhook receiver, one kubevirtsim,
// one githubsim delivering signed webhooks to the receiver, and stand-in
// agents (internal/sim/runnersim) that register each runner once its VM is up
// and power it off after its job.
package runnerlab

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/bench/proc"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
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
	// Wrap, if set, wraps the manager's transport to the API server (to
	// timestamp its requests).
	Wrap func(http.RoundTripper) http.RoundTripper
}

// Lab is a running lab.
type Lab struct {
	GitHub   *githubsim.Server
	KubeVirt *kubevirtsim.Simulator
}

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
		WebhookSecret: o.WebhookSecret, JobDuration: o.JobDuration, RateLimit: o.RateLimit, DeliveryConcurrency: o.DeliveryConcurrency})
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
	mgr, err := manager.New(cfg, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: OperatorNamespace,
		ObserveInterval: 30 * time.Second, FinalizationTimeout: 10 * time.Minute,
		OrphanSweepInterval: time.Minute, OrphanGrace: 10 * time.Minute,
		Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
			manager.ControllerMachineClaim, manager.ControllerRunnerPool},
		Runners: manager.RunnerOptions{WebhookAddr: addr, WebhookSecret: webhookSecretName, SyncInterval: syncInterval},
	})
	if err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stops = append(stops, func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "runnerlab: manager: %v\n", err)
		}
	})
	agents := &runnersim.Agents{Client: o.Client, GitHub: gh, Log: logr.Discard(),
		PowerOff: func(_ context.Context, claim *hypervisorv1alpha1.MachineClaim) error {
			return kv.GuestShutdown(claim.Namespace, claim.Status.MachineName)
		}}
	agents.Start(ctx)
	return &Lab{GitHub: gh, KubeVirt: kv}, stopAll, nil
}
