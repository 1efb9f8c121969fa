package poolprops_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

const (
	operatorNamespace = "hyperfleet-system"
	webhookSecret     = "hook-s3cret"
	repo              = "acme/widgets"
)

var (
	kv      *kubevirtsim.Simulator
	gh      *githubsim.Server
	rootCtx = context.Background()
	// clk is the pools' clock: the commands step it for the poll, the
	// idle TTL and the finished runners' grace instead of waiting.
	clk = clocktesting.NewFakeClock(time.Now())
	// op is the running operator; Restart replaces it.
	op *operator
)

// One kubevirtsim, one githubsim sending real signed workflow_job
// deliveries to the operator's receiver, stand-in agents inside the runner
// VMs, and an operator the commands may restart, for the whole package.
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
		gh = githubsim.New(githubsim.Options{Repositories: []string{repo}, WebhookURL: "http://" + addr + "/github/webhook",
			WebhookSecret: webhookSecret, JobDuration: time.Hour, RateLimit: 50000})
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
		if op, err = startOperator(addr); err != nil {
			return fail(err)
		}
		agents := &runnersim.Agents{Client: c, GitHub: gh, Log: logr.Discard(),
			PowerOff: func(_ context.Context, claim *hypervisorv1alpha1.MachineClaim) error {
				return kv.GuestShutdown(claim.Namespace, claim.Status.MachineName)
			}}
		agents.Start(ctx)
		return func() {
			if err := op.stop(); err != nil {
				fmt.Fprintf(os.Stderr, "manager: %v\n", err)
			}
			cancel()
			agents.Wait()
			gh.Close()
			kv.Stop()
		}, nil
	})
}

// operator is one run of the manager, as cmd/hyperfleet wires it, with
// the RunnerPool reconciler, the webhook receiver and what a pool's runners
// need (clusters, templates, claims).
type operator struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func startOperator(addr string) (*operator, error) {
	mgr, err := manager.New(testenv.Config(), manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: operatorNamespace,
		ObserveInterval: time.Second, FinalizationTimeout: time.Minute,
		OrphanSweepInterval: time.Minute, OrphanGrace: 10 * time.Minute,
		Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
			manager.ControllerMachineClaim, manager.ControllerRunnerPool},
		Runners: manager.RunnerOptions{WebhookAddr: addr, WebhookSecret: "github-webhook", SyncInterval: time.Second,
			GitHubTimeout: 5 * time.Second, Clock: clk},
		// Restart runs a new manager in this process.
		SkipControllerNameValidation: true,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &operator{addr: addr, cancel: cancel, done: make(chan error, 1)}
	go func() { o.done <- mgr.Start(ctx) }()
	return o, nil
}

// stop stops the manager and waits for it: its receiver has stopped
// listening, so deliveries meanwhile fail as with an operator that is down.
func (o *operator) stop() error {
	o.once.Do(func() {
		o.cancel()
		o.err = <-o.done
	})
	return o.err
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

const runnerVM = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","spec":{"template":{"spec":{"domain":{"devices":{}},
"volumes":[{"name":"root","containerDisk":{"image":"ghcr.io/example/runner-image:2.321.0"}}]}}}}`

// ownerKind is the label KubeVirt VMs made for claims carry.
var ownerKind = client.MatchingLabels{kubevirt.LabelOwnerKind: "MachineClaim"}
