//go:build !hourglass

package manager

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/version"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerlist"
	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
	"github.com/hyperfleet/hyperfleet/providers/github/webhook"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/runner"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
	"github.com/hyperfleet/hyperfleet/reconcilers/scalesetlistener"
)

// RunnerOptions configure the RunnerPool reconciler and the webhook receiver.
type RunnerOptions struct {
	// WebhookAddr is the receiver's listen address; "0" turns it off.
	WebhookAddr string
	// WebhookSecret names a Secret in the operator's namespace (labelled
	// hyperfleet.io/credentials) holding the secrets GitHub signs
	// deliveries with: key WebhookSecretKey, and per scope
	// WebhookSecretKey.<owner> and WebhookSecretKey.<owner>.<repository>
	// (webhook.ScopedSecret).
	WebhookSecret, WebhookSecretKey string
	// GitHubTimeout bounds one GitHub API request.
	GitHubTimeout time.Duration
	// SyncInterval: how often a steady pool re-reads its runners from GitHub.
	SyncInterval time.Duration
	// Runner is what the bootstrap agents install.
	Runner runnerconfig.Runner
	// AgentPath is the bootstrap agent's path in runner images.
	AgentPath string
	// ScaleSetSession paces the wait while GitHub says another listener
	// holds a scale set's session; the zero value is GitHub's (4 min).
	// Tests shorten it.
	ScaleSetSession scaleset.SessionPolicy
	// ScaleSetRetry is the pause after a failed scale-set session (5 s).
	ScaleSetRetry time.Duration
	// Clock drives the pools' timeouts (registration, idle TTL, lifetime,
	// poll interval); nil is the real clock. Tests set a fake one and step
	// it instead of waiting.
	Clock clock.Clock
}

// The webhook Secret and key when --webhook-secret and
// --webhook-secret-key are not given.
const (
	DefaultWebhookSecret    = "github-webhook"
	DefaultWebhookSecretKey = "webhookSecret"
)

func (o *RunnerOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.WebhookAddr, "webhook-bind-address", ":9443", "Address of the GitHub webhook receiver (POST /github/webhook); 0 turns it off.")
	fs.StringVar(&o.WebhookSecret, "webhook-secret", DefaultWebhookSecret, "Secret in the operator's namespace, labelled hyperfleet.io/credentials, holding the webhook secret.")
	fs.StringVar(&o.WebhookSecretKey, "webhook-secret-key", DefaultWebhookSecretKey, "Key of the webhook secret in that Secret; <key>.<owner> and <key>.<owner>.<repository> (lower case) are the secrets of one organization or repository, and only they verify its deliveries.")
	fs.DurationVar(&o.GitHubTimeout, "github-timeout", github.DefaultTimeout, "Timeout of one GitHub API request.")
	fs.DurationVar(&o.SyncInterval, "runnerpool-sync-interval", 15*time.Second, "How often a steady RunnerPool re-reads its runners from GitHub.")
	fs.StringVar(&o.Runner.Version, "runner-version", "", "actions/runner version the bootstrap agents install. Default: the agent's own.")
	fs.StringVar(&o.Runner.DownloadURL, "runner-download-url", "", "Runner download URL template ({version}, {os}, {arch}). Default: the agent's own (GitHub releases).")
	fs.StringVar(&o.AgentPath, "bootstrap-agent-path", runnerpool.DefaultAgentPath, "Path of hyperfleet-bootstrap in the runner images.")
}

// setupRunners registers the RunnerPool reconciler and the webhook
// receiver that feeds it. The receiver runs on every replica and records
// each delivery as a RunnerJob before answering; the reconciler (leader
// only) scales from those records.
func setupRunners(mgr ctrl.Manager, o Options, secrets *credentials.Reader) error {
	ro := o.Runners
	// The pool and its runners share one client per pool and one listing
	// of the runners registered per credential and scope.
	gh := &runnerstate.GitHub{Secrets: secrets, Clients: github.NewClients(), RateLimiter: github.DefaultRateLimiter(), Timeout: ro.GitHubTimeout, Version: version.String()}
	// The scale sets' sessions, held by the leader (a Runnable that needs
	// leader election), one per scale-set pool.
	listeners := &scalesetlistener.Listeners{Owner: cmp.Or(o.Identity, "hyperfleet"), Session: ro.ScaleSetSession, Retry: ro.ScaleSetRetry,
		Log: mgr.GetLogger().WithName("scaleset")}
	if err := mgr.Add(listeners); err != nil {
		return err
	}
	listing := &runnerlist.Cache{Interval: cmp.Or(ro.SyncInterval, 15*time.Second)}
	runners := &runner.Reconciler{
		Client: mgr.GetClient(), GitHub: gh, Runners: listing, Recorder: mgr.GetEventRecorder("runner"),
		Clock: ro.Clock, SyncInterval: ro.SyncInterval, MaxConcurrentReconciles: o.Workers.For(WorkersRunner),
	}
	if err := runners.SetupWithManager(mgr); err != nil {
		return err
	}
	r := &runnerpool.Reconciler{
		Client: mgr.GetClient(), GitHub: gh, Runners: listing, Wake: runners.Wake, Listeners: listeners, Recorder: mgr.GetEventRecorder("runnerpool"),
		Runner: ro.Runner, AgentPath: ro.AgentPath, SyncInterval: ro.SyncInterval, FinalizationTimeout: o.FinalizationTimeout,
		Clock: ro.Clock, MaxConcurrentReconciles: o.Workers.For(WorkersRunnerPool),
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	// Options made without the flags (the sandbox, tests) get the flags'
	// defaults: an empty name would fail every delivery.
	key := types.NamespacedName{Namespace: o.OperatorNamespace, Name: cmp.Or(ro.WebhookSecret, DefaultWebhookSecret)}
	dataKey := cmp.Or(ro.WebhookSecretKey, DefaultWebhookSecretKey)
	return mgr.Add(&webhook.Receiver{
		Addr:   ro.WebhookAddr,
		Handle: r.HandleJob,
		Log:    mgr.GetLogger().WithName("webhook"),
		// Read through the shared credentials reader (label-gated), so a
		// rotated secret is in use within its reuse time. The Secret is in
		// the operator's namespace, which only the platform admin writes:
		// a tenant can neither read nor add a scope's key.
		Secret: func(ctx context.Context, scope webhook.Scope) ([]byte, error) {
			s, err := secrets.Secret(ctx, key, "--webhook-secret")
			if err != nil {
				return nil, fmt.Errorf("webhook Secret %s (needs the label %s): %w", key, meta.CredentialsLabel, err)
			}
			return webhook.ScopedSecret(s.Data, dataKey, scope)
		},
	})
}
