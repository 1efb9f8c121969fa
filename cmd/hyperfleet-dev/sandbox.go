package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/logging"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sandbox"
)

// runSandbox runs the sandbox until it is interrupted.
func runSandbox(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hyperfleet-dev", flag.ContinueOnError)
	fs.Usage = func() {
		_, _ = fmt.Fprint(stderr, "Usage: hyperfleet-dev [flags]\n       hyperfleet-dev enqueue-jobs [flags]\n\nThe embedded sandbox: a real control plane, the manager, the simulators and the samples.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.SetOutput(stderr)
	o := sandbox.Options{Out: stdout}
	var webhookAddr string
	var logOpts logging.Options
	fs.StringVar(&o.StateDir, "state-dir", ".hyperfleet/dev", "Directory for the sandbox's kubeconfig.")
	fs.StringVar(&o.SamplesNamespace, "samples-namespace", "default", "Namespace the samples (pointed at the simulators) and the demo claims go into; empty skips them.")
	fs.StringVar(&o.Manager.MetricsAddr, "metrics-bind-address", "127.0.0.1:8080", "Address of the manager's metrics endpoint (plain HTTP in the sandbox); 0 turns it off.")
	fs.StringVar(&o.Manager.ProbeAddr, "health-probe-bind-address", "127.0.0.1:8081", "Address of /healthz and /readyz; 0 turns them off.")
	fs.StringVar(&o.ProxmoxAddr, "proxmox-sim-address", "127.0.0.1:8006", "Address of the simulated Proxmox VE API the sample HypervisorCluster pve-sim uses; empty runs no simulator.")
	fs.IntVar(&o.DemoClaims, "demo-claims", 3, "MachineClaims to add to the samples' on the simulated Proxmox.")
	fs.StringVar(&o.GitHubAddr, "github-sim-address", "127.0.0.1:8090", "Address of the simulated GitHub (REST API, runners, jobs, webhooks) that the sample RunnerPool demo-runners uses; empty runs none. Needs --kubevirt-sim.")
	fs.StringVar(&o.SPIREAddr, "spire-address", "127.0.0.1:18081", "Address (on 127.0.0.1) of the SPIRE server the sandbox runs with the GitHub simulator; the sample runner template's machines attest to it with join tokens. Needs the binaries of `make spire` (or HYPERFLEET_SPIRE_DIR).")
	fs.StringVar(&webhookAddr, "webhook-bind-address", "127.0.0.1:9443", "Address of the manager's GitHub webhook receiver.")
	fs.BoolVar(&o.KubeVirt, "kubevirt-sim", true, "Run the KubeVirt simulator (VirtualMachine CRDs and a stand-in for virt-controller and virt-handler) for Cyberdesks and kubevirt clusters.")
	logOpts.BindFlags(fs, "console")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if _, err := logging.Setup(logOpts); err != nil {
		return err
	}
	// The sandbox runs like production: leader election on, in the operator's namespace.
	defaults := manager.Options{}
	defaults.BindFlags(flag.NewFlagSet("defaults", flag.ContinueOnError))
	defaults.MetricsAddr, defaults.ProbeAddr, defaults.MetricsSecure = o.Manager.MetricsAddr, o.Manager.ProbeAddr, false
	defaults.OperatorNamespace = "hyperfleet-system"
	// Short enough that a newcomer sees the sweeper act during a demo.
	defaults.OrphanGrace = 2 * time.Minute
	defaults.Runners.WebhookAddr = webhookAddr
	o.Manager = defaults
	if err := o.Manager.Complete(); err != nil {
		return err
	}
	return sandbox.Run(ctrl.SetupSignalHandler(), o)
}
