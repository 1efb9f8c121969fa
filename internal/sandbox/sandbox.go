// Package sandbox is `hyperfleet dev`: a real kube-apiserver and etcd with the
// HyperFleet CRDs, the manager running in-process against them, and the
// samples applied, for a machine with no cluster at hand.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
	"github.com/hyperfleet/hyperfleet/kustomize/crd"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/providers/proxmox/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/samples"
)

// fieldOwner marks what the sandbox applied.
const fieldOwner = "hyperfleet-dev"

// Options configure the sandbox.
type Options struct {
	// StateDir receives the kubeconfig.
	StateDir string
	// SamplesNamespace receives the samples; empty skips them.
	SamplesNamespace string
	// Manager configures the in-process manager.
	Manager manager.Options
	// Out receives the progress and usage text meant for a person.
	Out io.Writer
	// Ready, if set, is called with the kubeconfig path once everything runs.
	Ready func(kubeconfig string)

	// ProxmoxAddr is where the Proxmox VE simulator listens; empty skips it.
	ProxmoxAddr string
	// ProxmoxLatencies overrides the simulator's realistic task latencies.
	ProxmoxLatencies *proxmoxsim.Latencies
	// SandboxNamespace receives the objects that use the simulators.
	SandboxNamespace string
	// DemoClaims is how many MachineClaims the sandbox creates on the simulator.
	DemoClaims int

	// KubeVirt runs kubevirtsim in place of KubeVirt's controllers, so the
	// sample Cyberdesk and kubevirt MachineClaims come up.
	KubeVirt bool
	// KubeVirtLatencies overrides the simulator's realistic boot latencies.
	KubeVirtLatencies *kubevirtsim.Latencies

	// GitHubAddr is where the GitHub simulator listens, with a demo
	// RunnerPool on KubeVirt (needs KubeVirt); empty skips it.
	GitHubAddr string

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

	if !o.NoCluster {
		stop, err := startCluster(ctx, plane.Config, say, o.Out)
		if err != nil {
			return err
		}
		defer stop()
	}

	c, err := client.New(plane.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	if err := ensureNamespace(ctx, c, o.Manager.OperatorNamespace); err != nil {
		return err
	}

	if o.ProxmoxAddr != "" {
		sim, err := startProxmox(o)
		if err != nil {
			return err
		}
		defer sim.Close()
		say("==> Proxmox VE simulator at %s (token %s)", sim.URL(), tokenIDOf(sim))
		if err := ensureNamespace(ctx, c, o.SandboxNamespace); err != nil {
			return err
		}
		if err := createAll(ctx, c, o.SandboxNamespace, proxmoxObjects(sim, o.DemoClaims)); err != nil {
			return err
		}
		say("==> Created HypervisorCluster pve-sim, template ubuntu-sim and %d MachineClaims in namespace %s", o.DemoClaims, o.SandboxNamespace)
	}

	var kv *kubevirtsim.Simulator
	if o.KubeVirt {
		if kv, err = startKubeVirt(ctx, plane.Config, c, o); err != nil {
			return err
		}
		defer kv.Stop()
		say("==> KubeVirt simulator running (VirtualMachines boot in about 30 s); Cyberdesk template in ConfigMap %s/cyberdesk-vm-template", o.Manager.OperatorNamespace)
	}
	if o.GitHubAddr != "" && kv != nil {
		gh, err := startGitHub(ctx, c, o)
		if err != nil {
			return err
		}
		defer gh.Close()
		if err := ensureNamespace(ctx, c, o.SandboxNamespace); err != nil {
			return err
		}
		if err := createAll(ctx, c, o.SandboxNamespace, runnerObjects(gh)); err != nil {
			return err
		}
		startAgents(ctx, c, gh, kv, o.SandboxNamespace)
		say("==> GitHub simulator at %s (repository %s, webhooks to %s); RunnerPool demo-runners in namespace %s", gh.URL(), SandboxRepository, o.Manager.Runners.WebhookAddr, o.SandboxNamespace)
	}

	say("==> Starting the HyperFleet manager in-process (leader election in namespace %s)", o.Manager.OperatorNamespace)
	mgrDone, err := startManager(ctx, plane.Config, o.Manager)
	if err != nil {
		return err
	}

	if o.SamplesNamespace != "" {
		if err := ensureNamespace(ctx, c, o.SamplesNamespace); err != nil {
			return err
		}
		n, err := applySamples(ctx, c, o.SamplesNamespace)
		if err != nil {
			return err
		}
		say("==> Applied %d sample objects into namespace %s", n, o.SamplesNamespace)
	}

	say("")
	say("HyperFleet sandbox is up (%s). In another terminal:", time.Since(started).Round(100*time.Millisecond))
	say("")
	say("  export KUBECONFIG=%s", kubeconfig)
	say("  kubectl get hypervisorclusters,hypervisormachinetemplates,machineclaims,runnerpools,cyberdesks,performers,hourglassexecutors -A")
	if o.ProxmoxAddr != "" {
		say("  kubectl get hypervisorclusters,machineclaims -n %s -w     # watch the demo claims reach Ready", o.SandboxNamespace)
	}
	if o.KubeVirt {
		say("  kubectl get cyberdesks,vm,vmi -A                            # the sample desktop boots on the KubeVirt simulator")
		say("  kubectl edit configmap -n %s cyberdesk-vm-template   # changes the next desktops", o.Manager.OperatorNamespace)
	}
	if o.GitHubAddr != "" && o.KubeVirt {
		say("  hyperfleet enqueue-jobs --count 5                          # queue GitHub jobs; watch: kubectl get runnerpools,machineclaims -n %s -w", o.SandboxNamespace)
	}
	if !o.NoCluster {
		say("  kubectl get nodes                                          # KWOK's simulated nodes: general, GPU, SGX, Bottlerocket")
		if o.SamplesNamespace != "" {
			say("  kubectl get pods,endpointslices -n %s -o wide          # the performers' Pods, placed by the real scheduler, and their endpoints", o.SamplesNamespace)
		}
	}
	say("  kubectl explain machineclaim.spec")
	if o.Manager.MetricsAddr != "0" {
		say("  curl -s http://%s/metrics | grep hyperfleet_", o.Manager.MetricsAddr)
	}
	say("")
	say("Press Ctrl-C to stop; the sandbox keeps no state between runs.")
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

func applySamples(ctx context.Context, c client.Client, namespace string) (int, error) {
	files, names, err := samples.Files()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		objs, err := manifests.Decode(name, files[name])
		if err != nil {
			return n, err
		}
		if err := manifests.Apply(ctx, c, namespace, fieldOwner, objs); err != nil {
			return n, fmt.Errorf("sample %s: %w", name, err)
		}
		n += len(objs)
	}
	return n, nil
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
