package sandbox

import (
	"fmt"
	"io"
	"time"
)

// running is what the sandbox started, for the message that ends its start.
type running struct {
	opts                  Options
	kubeconfig            string
	took                  time.Duration
	nodes                 int // KWOK's simulated nodes; 0 without the scheduler and controller-manager
	proxmoxURL, githubURL string
	spireAddr             string
	kubevirt              bool
	samples, claims       int
}

// print tells a person what runs and what to try next, in a dozen lines.
func (r running) print(out io.Writer) {
	say := func(format string, args ...any) { _, _ = fmt.Fprintf(out, format+"\n", args...) }
	o := r.opts
	say("")
	say("HyperFleet sandbox is up (%s):", r.took.Round(100*time.Millisecond))
	if r.nodes > 0 {
		say("  cluster     kube-apiserver, etcd, kube-scheduler, kube-controller-manager; KWOK runs %d nodes", r.nodes)
	} else {
		say("  cluster     kube-apiserver and etcd only: Pods stay Pending")
	}
	if r.proxmoxURL != "" {
		say("  Proxmox VE  simulator at %s", r.proxmoxURL)
	}
	if r.kubevirt {
		say("  KubeVirt    simulator (kubevirtsim) for VirtualMachines")
	}
	if r.githubURL != "" {
		say("  GitHub      simulator at %s (repository %s)", r.githubURL, SandboxRepository)
	}
	if r.spireAddr != "" {
		say("  SPIRE       server at %s (trust domain %s): demo-runners' machines attest with join tokens, attested-box with its vTPM (swtpm)", r.spireAddr, SandboxTrustDomain)
	}
	say("  manager     in-process, leader election in namespace %s", o.Manager.OperatorNamespace)
	ns := ""
	if o.SamplesNamespace != "" {
		say("  samples     %d objects from samples/ and %d demo MachineClaims in namespace %s", r.samples, r.claims, o.SamplesNamespace)
		if o.SamplesNamespace != "default" {
			ns = " -n " + o.SamplesNamespace
		}
	}
	say("")
	say("In another terminal:")
	say("")
	// try prints a command with its comment in a column.
	try := func(command, why string) { say("  %-46s # %s", command, why) }
	say("  export KUBECONFIG=%s", r.kubeconfig)
	try("kubectl get hvc,hmt,mc,rp,cd,perf,hge -A", "every object turns Ready within a minute")
	if r.nodes > 0 {
		try("kubectl get nodes", "the simulated nodes: general, GPU, SGX, Bottlerocket")
		try("kubectl get pods,endpointslices -o wide"+ns, "Performer Pods where their hardware is, and their endpoints")
	}
	if r.githubURL != "" {
		try("go run ./cmd/hyperfleet-dev enqueue-jobs --count 5", "queue GitHub jobs, then: kubectl get rp,mc -w"+ns)
		try("go run ./cmd/hyperfleet-dev enqueue-jobs --mode scale-set", "the same for the scale-set pool (no webhook)")
	}
	if r.kubevirt {
		try("kubectl edit cm -n "+o.Manager.OperatorNamespace+" cyberdesk-vm-template", "changes the next desktops")
		if hot := o.Manager.Cyberdesk.Standby.Hot[o.SamplesNamespace]; hot > 0 {
			try("kubectl get mc -l hyperfleet.io/standby=Cyberdesk"+ns, fmt.Sprintf("%d hot desk machine(s): a Cyberdesk without userData takes one", hot))
		}
	}
	if o.Manager.MetricsAddr != "0" {
		say("  curl -s http://%s/metrics | grep hyperfleet_", o.Manager.MetricsAddr)
	}
	say("")
	say("Press Ctrl-C to stop; the sandbox keeps no state between runs.")
}
