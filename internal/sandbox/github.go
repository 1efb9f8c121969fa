package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
)

// SandboxRepository is the repository of the simulated GitHub.
const SandboxRepository = "acme/widgets"

// startGitHub runs githubsim, sending signed workflow_job deliveries to the
// manager's webhook receiver, and the webhook Secret the receiver reads.
func startGitHub(ctx context.Context, c client.Client, o Options) (*githubsim.Server, error) {
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	webhookSecret := hex.EncodeToString(secret)
	sim := githubsim.New(githubsim.Options{
		Repositories: []string{SandboxRepository}, JobDuration: 20 * time.Second,
		WebhookURL: "http://" + o.Manager.Runners.WebhookAddr + "/github/webhook", WebhookSecret: webhookSecret,
		ErrorLog: log.New(io.Discard, "", 0),
	})
	if err := sim.StartOn(o.GitHubAddr); err != nil {
		return nil, fmt.Errorf("starting the GitHub simulator on %s: %w", o.GitHubAddr, err)
	}
	name := cmp.Or(o.Manager.Runners.WebhookSecret, manager.DefaultWebhookSecret)
	key := cmp.Or(o.Manager.Runners.WebhookSecretKey, manager.DefaultWebhookSecretKey)
	err := createAll(ctx, c, o.Manager.OperatorNamespace, []client.Object{&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{key: webhookSecret},
	}})
	if err != nil {
		sim.Close()
		return nil, err
	}
	return sim, nil
}

// githubSecrets is the Secret samples/40-runnerpool-sim.yaml references,
// holding the simulator's token.
func githubSecrets(sim *githubsim.Server) []client.Object {
	return []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "github-sim-pat", Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"token": sim.PAT()}},
	}
}

// startAgents plays the bootstrap agent inside every runner VM: with rig,
// the real one as a process (attesting through a spire-agent when the
// template asks), else the in-process stand-in. Wait on the result for the
// agents' processes to end once ctx has.
func startAgents(ctx context.Context, c client.Client, gh *githubsim.Server, kv *kubevirtsim.Simulator, namespace string, rig *attestationRig) *runnersim.Agents {
	log := ctrl.LoggerFrom(ctx).WithName("runner-agents")
	agents := &runnersim.Agents{Client: c, GitHub: gh, Namespace: namespace, Log: log,
		PowerOff: func(_ context.Context, claim *hypervisorv1alpha1.MachineClaim) error {
			return kv.GuestShutdown(claim.Namespace, claim.Status.MachineName)
		}}
	if rig != nil {
		agents.Process = func(claim *hypervisorv1alpha1.MachineClaim) *runnersim.Process {
			p, err := rig.process(claim)
			if err != nil {
				// The stand-in then reports that it cannot attest.
				log.Error(err, "Preparing the simulated VM for the real agent failed", "claim", claim.Name)
				return nil
			}
			return p
		}
	}
	agents.Start(ctx)
	return agents
}
