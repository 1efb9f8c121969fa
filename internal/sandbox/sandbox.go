// Package sandbox is `hyperfleet-dev`: a real kube-apiserver and etcd with the
// HyperFleet CRDs, the manager running in-process against them, and the
// samples applied, for a machine with no cluster at hand.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/kustomize/admission"
	"github.com/hyperfleet/hyperfleet/kustomize/crd"
)

// fieldOwner marks what the sandbox applied.
const fieldOwner = "hyperfleet-dev"

// Options configure the sandbox.
type Options struct {
	// StateDir receives the kubeconfig.
	StateDir string
	// SamplesNamespace receives the samples, the Secrets they read from the
	// simulators and the demo claims; empty skips them all.
	SamplesNamespace string
	// Manager configures the in-process manager.
	Manager manager.Options
	// Out receives the progress and usage text meant for a person.
	Out io.Writer
	// Ready, if set, is called with the kubeconfig path once everything runs.
	Ready func(kubeconfig string)

	// ProxmoxAddr is where the Proxmox VE simulator the sample
	// HypervisorCluster pve-sim points at listens; empty skips it.
	ProxmoxAddr string
	// ProxmoxLatencies overrides the simulator's realistic task latencies.
	ProxmoxLatencies *proxmoxsim.Latencies
	// DemoClaims is how many MachineClaims the sandbox adds to the samples'
	// on the simulated Proxmox.
	DemoClaims int

	// KubeVirt runs kubevirtsim in place of KubeVirt's controllers, so the
	// sample Cyberdesk and the kubevirt machines come up.
	KubeVirt bool
	// KubeVirtLatencies overrides the simulator's realistic boot latencies.
	KubeVirtLatencies *kubevirtsim.Latencies

	// GitHubAddr is where the GitHub simulator the sample RunnerPool
	// demo-runners points at listens (needs KubeVirt, where its runners
	// run); empty skips it.
	GitHubAddr string
	// SPIREAddr is where the SPIRE server the demo runner pool's machines
	// attest to listens (127.0.0.1:port; the sample template names
	// `hyperfleet-dev`'s default); it runs with the GitHub simulator.
	SPIREAddr string

	// NoCluster leaves out the scheduler, the controller-manager and KWOK's
	// simulated nodes (internal/testcluster): Pods then stay Pending.
	NoCluster bool
}

// Run brings the sandbox up, blocks until ctx ends, then tears it down.
func Run(ctx context.Context, o Options) error {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(o.Out, format+"\n", args...) }
	started := time.Now()

	say("==> Locating the control plane (kube-apiserver and etcd, built from source under bin/)")
	dir, err := controlplane.BinaryDir(ctx, o.Out)
	if err != nil {
		return err
	}
	crds, err := crd.CRDs()
	if err != nil {
		return err
	}
	if o.KubeVirt {
		crds = append(crds, kubevirtsim.CRDs()...)
	}
	say("==> Starting etcd and kube-apiserver from %s and installing %d CRDs", dir, len(crds))
	plane, err := controlplane.Start(controlplane.Options{BinaryDir: dir, CRDs: crds})
	if err != nil {
		return err
	}
	defer func() {
		say("==> Stopping kube-apiserver and etcd")
		if err := plane.Stop(); err != nil {
			say("    stopping the control plane: %v", err)
		}
	}()

	kubeconfig, err := filepath.Abs(filepath.Join(o.StateDir, "kubeconfig"))
	if err != nil {
		return err
	}
	if err := plane.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}

	up := running{opts: o, kubeconfig: kubeconfig}
	if !o.NoCluster {
		nodes, stop, err := startCluster(ctx, plane.Config, say, o.Out)
		if err != nil {
			return err
		}
		defer stop()
		up.nodes = len(nodes)
	}

	c, err := client.New(plane.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	if err := ensureNamespace(ctx, c, o.Manager.OperatorNamespace); err != nil {
		return err
	}
	say("==> Installing the admission policy that stores new MachineClaims with their finalizer")
	if err := admission.Install(ctx, c); err != nil {
		return err
	}

	var secrets []client.Object
	var pve *proxmoxsim.Server
	if o.ProxmoxAddr != "" {
		if pve, err = startProxmox(o); err != nil {
			return err
		}
		defer pve.Close()
		up.proxmoxURL = pve.URL()
		secrets = append(secrets, proxmoxSecrets(pve)...)
		say("==> Proxmox VE simulator at %s (token %s)", pve.URL(), tokenIDOf(pve))
	}

	var kv *kubevirtsim.Simulator
	if o.KubeVirt {
		if kv, err = startKubeVirt(ctx, plane.Config, c, o); err != nil {
			return err
		}
		defer kv.Stop()
		up.kubevirt = true
		say("==> KubeVirt simulator running (VirtualMachines boot in about 30 s); Cyberdesk template in ConfigMap %s/cyberdesk-vm-template", o.Manager.OperatorNamespace)
		if o.SamplesNamespace != "" && o.Manager.Cyberdesk.Standby.Hot == nil {
			// One hot desk machine, as --cyberdesk-standby keeps them: a
			// desk with no user data of its own runs at once.
			o.Manager.Cyberdesk.Standby.Hot = map[string]int32{o.SamplesNamespace: 1}
			up.opts.Manager.Cyberdesk.Standby = o.Manager.Cyberdesk.Standby
		}
	}
	switch {
	case o.GitHubAddr != "" && kv == nil:
		say("==> Not starting the GitHub simulator: its runners run on KubeVirt (--kubevirt-sim)")
	case o.GitHubAddr != "":
		say("==> Starting a SPIRE server for the demo runner pool's machines, which attest with join tokens, and attested-box, which attests with its vTPM")
		rig, err := startAttestation(ctx, o.SPIREAddr, say)
		if err != nil {
			return err
		}
		defer func() {
			say("==> Stopping the SPIRE server")
			rig.stop()
		}()
		up.spireAddr = rig.server.Address()
		o.Manager.Attestation.AdminSocket, o.Manager.Attestation.TrustDomain = rig.server.SocketPath, SandboxTrustDomain
		o.Manager.Attestation.EndpointAddr, o.Manager.Attestation.EndpointURL = rig.endpointAddr, "https://"+rig.endpointAddr
		// The bootstrap agent runs as this process's user, not root.
		o.Manager.Attestation.Selectors = []string{fmt.Sprintf("unix:uid:%d", os.Getuid())}
		gh, err := startGitHub(ctx, c, o)
		if err != nil {
			return err
		}
		defer gh.Close()
		up.githubURL = gh.URL()
		secrets = append(secrets, githubSecrets(gh)...)
		agents := startAgents(ctx, c, gh, kv, o.SamplesNamespace, rig)
		rig.tpm.start(ctx, c, o.SamplesNamespace, rig, ctrl.LoggerFrom(ctx).WithName("tpm-machines"))
		// Before the SPIRE server stops: the runner VMs and the TPM demo
		// machines shut down (their bootstrap agents stop their
		// spire-agents) once ctx has ended.
		defer func() {
			say("==> Stopping the simulated runner VMs and TPM machines (their bootstrap agents and spire-agents)")
			agents.Wait()
			rig.tpm.wait()
		}()
		say("==> GitHub simulator at %s (repository %s, webhooks to %s)", gh.URL(), SandboxRepository, o.Manager.Runners.WebhookAddr)
	}

	say("==> Starting the HyperFleet manager in-process (leader election in namespace %s)", o.Manager.OperatorNamespace)
	mgrDone, err := startManager(ctx, plane.Config, o.Manager)
	if err != nil {
		return err
	}

	if o.SamplesNamespace != "" {
		if up.samples, up.claims, err = applyAll(ctx, c, o, secrets, simulatorURLs{proxmox: up.proxmoxURL, github: up.githubURL, spire: up.spireAddr}); err != nil {
			return err
		}
		say("==> Applied %d sample objects and %d demo MachineClaims into namespace %s", up.samples, up.claims, o.SamplesNamespace)
	}

	up.took = time.Since(started)
	up.print(o.Out)
	if o.Ready != nil {
		o.Ready(kubeconfig)
	}

	<-ctx.Done()
	say("")
	say("==> Stopping the manager")
	if err := <-mgrDone; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// applyAll puts the simulators' Secrets, the samples pointed at the
// simulators and the demo claims into the samples namespace; it returns how
// many samples and claims it applied.
func applyAll(ctx context.Context, c client.Client, o Options, secrets []client.Object, urls simulatorURLs) (int, int, error) {
	if err := ensureNamespace(ctx, c, o.SamplesNamespace); err != nil {
		return 0, 0, err
	}
	if err := createAll(ctx, c, o.SamplesNamespace, secrets); err != nil {
		return 0, 0, err
	}
	n, err := applySamples(ctx, c, o.SamplesNamespace, urls)
	if err != nil {
		return n, 0, err
	}
	if urls.proxmox == "" {
		return n, 0, nil
	}
	claims := demoClaims(o.DemoClaims)
	return n, len(claims), createAll(ctx, c, o.SamplesNamespace, claims)
}

func startManager(ctx context.Context, cfg *rest.Config, o manager.Options) (<-chan error, error) {
	mgr, err := manager.New(cfg, o)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	// Fail fast if the manager could not even start (a port in use, say).
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !mgr.GetCache().WaitForCacheSync(waitCtx) {
		select {
		case err := <-done:
			return nil, fmt.Errorf("the manager stopped at start: %w", err)
		default:
			return nil, errors.New("the manager's caches did not sync within 30s")
		}
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Manager caches synced")
	return done, nil
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

func tokenIDOf(sim *proxmoxsim.Server) string {
	id, _ := sim.APIToken()
	return id
}
