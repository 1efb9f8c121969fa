package githubcost

import (
	"context"
	"fmt"
	"net"
	"os"
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
	webhookSecret     = "hook-s3cret"
	repo              = "acme/widgets"
)

var (
	gh *githubsim.Server
	kv *kubevirtsim.Simulator
)

// One manager with the production defaults of its runner flags (sync
// interval, poll interval, timeouts), one kubevirtsim, one githubsim sending
// signed deliveries to the manager's receiver, and stand-in agents in the
// runner VMs.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		ctx, cancel := context.WithCancel(context.Background())
		fail := func(err error) (func(), error) { cancel(); return nil, err }
		if err := kubevirtsim.Install(ctx, testenv.Config()); err != nil {
			return fail(err)
		}
		var err error
		kv, err = kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()})
		if err != nil {
			return fail(err)
		}
		addr, err := freeAddr()
		if err != nil {
			return fail(err)
		}
		// GitHub's budget is 5000 an hour; a larger one keeps the run from
		// being throttled, so the figures are what the pools ask for.
		gh = githubsim.New(githubsim.Options{Repositories: []string{repo}, WebhookURL: "http://" + addr + "/github/webhook",
			WebhookSecret: webhookSecret, JobDuration: 200 * time.Millisecond, RateLimit: 1_000_000})
		if err := gh.Start(); err != nil {
			kv.Stop()
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
		mgr, err := manager.New(testenv.Config(), manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: operatorNamespace,
			ObserveInterval: 30 * time.Second, FinalizationTimeout: 10 * time.Minute,
			OrphanSweepInterval: time.Minute, OrphanGrace: 10 * time.Minute,
			Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
				manager.ControllerMachineClaim, manager.ControllerRunnerPool},
			// The flags' defaults (manager.RunnerOptions.bindFlags).
			Runners: manager.RunnerOptions{WebhookAddr: addr, WebhookSecret: "github-webhook", SyncInterval: 15 * time.Second},
		})
		if err != nil {
			return fail(err)
		}
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		agents := &runnersim.Agents{Client: c, GitHub: gh, Log: logr.Discard(), PowerOff: func(_ context.Context, c *hypervisorv1alpha1.MachineClaim) error {
			return kv.GuestShutdown(c.Namespace, c.Status.MachineName)
		}}
		agents.Start(ctx)
		return func() {
			cancel()
			if err := <-done; err != nil {
				fmt.Fprintf(os.Stderr, "manager: %v\n", err)
			}
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
