package manager

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/hyperfleet/hyperfleet/providers"
)

// inClusterNamespaceFile holds the Pod's namespace when running in a cluster.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Options configure the manager. BindFlags fills them from the command line;
// Complete fills what the environment can tell.
type Options struct {
	MetricsAddr   string
	MetricsSecure bool
	ProbeAddr     string
	// PprofAddr serves net/http/pprof, for a heap or CPU profile of a
	// running operator; empty or 0 turns it off (the default).
	PprofAddr string

	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// Identity names this replica in the Lease: POD_NAME, else the hostname.
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// Namespaces to watch; empty watches all.
	Namespaces []string
	// OperatorNamespace is where the operator's own configuration lives.
	OperatorNamespace string

	// ObserveInterval: how often running machines are looked at.
	ObserveInterval time.Duration
	// FinalizationTimeout: how long a deleted claim waits for its machine's
	// deletion before it is released and the machine left to the sweeper.
	FinalizationTimeout time.Duration
	// MachineClaimClock tells MachineClaims' timeouts, expiries and
	// finalization deadlines; nil is the real clock. Tests step a fake.
	MachineClaimClock clock.PassiveClock
	// ClusterDeletionTimeout: how long a deleted HypervisorCluster (and its
	// Secrets) waits for the machines made through it to be deleted before
	// it is released with a Warning event.
	ClusterDeletionTimeout time.Duration
	// OrphanSweepInterval and OrphanGrace pace the orphan sweeper.
	OrphanSweepInterval, OrphanGrace time.Duration

	// Controllers are the reconcilers to run (AllControllers' names); empty
	// or "*" runs them all. Suites run only the ones their kind needs;
	// operators may split kinds over two Deployments.
	Controllers []string
	// Workers set reconcilers' worker counts; unnamed ones keep their
	// defaults.
	Workers Workers
	// ReconcileTimeout bounds every reconcile of every controller
	// (controller-runtime's ReconciliationTimeout): a reconcile past it
	// has its context cancelled, writes its status and is retried with
	// backoff. 0 turns it off.
	ReconcileTimeout time.Duration

	// SkipControllerNameValidation lets one process run several managers
	// in turn (tests that crash and restart the operator).
	SkipControllerNameValidation bool

	// InstallationID names this installation on the hypervisors: every
	// machine carries it, and only machines carrying it (or none, made
	// before installations) are listed, touched or swept. Default: the UID
	// of OperatorNamespace, read at start (installation.go).
	InstallationID string

	// Cyberdesk and Hourglass configure those kinds' reconcilers.
	Cyberdesk CyberdeskOptions
	Hourglass HourglassOptions
	// Runners configure RunnerPools and the webhook receiver.
	Runners RunnerOptions
	// Attestation configures SPIRE and the credential endpoint.
	Attestation AttestationOptions
}

// DefaultReconcileTimeout is --reconcile-timeout's default: well past one
// reconcile's outside calls at their own deadlines (a Proxmox request is
// bounded at 30 s, a SPIRE call at 10 s; a reconcile makes a few), and
// short enough that a reconcile stuck on something without a deadline
// gives its worker back within minutes.
const DefaultReconcileTimeout = 2 * time.Minute

// BindFlags registers the manager's flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; 0 turns it off.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, allowing only clients the API server authenticates and authorizes (get on /metrics).")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz; 0 turns them off.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "0", "Address of net/http/pprof (/debug/pprof/), for profiling a running operator; 0 turns it off. Bind it to localhost and reach it with kubectl port-forward.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "Elect one active replica through a Lease; the others wait to take over.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", "hyperfleet-leader", "Name of the leader-election Lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the Lease. Default: the operator's namespace.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a leader's Lease is valid without renewal; the failover time.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader keeps trying to renew before it steps down.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 2*time.Second, "How often candidates try to take the Lease.")
	fs.Func("namespaces", "Comma-separated namespaces to watch. Default: all.", func(s string) error {
		o.Namespaces = splitList(s)
		return nil
	})
	fs.DurationVar(&o.ObserveInterval, "machine-observe-interval", 30*time.Second, "How often a running machine's state is read from its hypervisor.")
	fs.DurationVar(&o.FinalizationTimeout, "finalization-timeout", 10*time.Minute, "How long a deleted MachineClaim waits for its machine's deletion before it is released (with a Warning event) and the machine left to the orphan sweeper.")
	fs.DurationVar(&o.ClusterDeletionTimeout, "cluster-deletion-timeout", 30*time.Minute, "How long a deleted HypervisorCluster, and its credentials Secrets, wait for the machines made through it to be deleted before the cluster is released with a Warning event naming what is left.")
	fs.DurationVar(&o.OrphanSweepInterval, "orphan-sweep-interval", time.Minute, "How often hypervisors are swept for machines whose MachineClaim is gone.")
	fs.DurationVar(&o.OrphanGrace, "orphan-grace", 10*time.Minute, "How long a machine must be seen without its MachineClaim before the sweeper deletes it.")
	fs.StringVar(&o.OperatorNamespace, "operator-namespace", "", "The operator's own namespace. Default: POD_NAMESPACE, the in-cluster namespace, or hyperfleet-system.")
	fs.Func("controllers", "Comma-separated reconcilers to run, or * for all: "+strings.Join(AllControllers, ", ")+". Default: all.", func(s string) error {
		o.Controllers = splitList(s)
		return checkControllers(o.Controllers)
	})
	fs.Func("workers", "Comma-separated name=count worker counts per reconciler ("+strings.Join(workerNames, ", ")+"), for example performer=16. Default: each reconciler's own, chosen from `make bench`.", func(s string) error {
		w, err := parseWorkers(s)
		o.Workers = w
		return err
	})
	fs.DurationVar(&o.ReconcileTimeout, "reconcile-timeout", DefaultReconcileTimeout, "How long one reconcile of any object may run before its context is cancelled; its status is still written and it is retried with backoff. A backstop behind the per-call deadlines of every outside system: no reconcile holds a worker longer. 0 turns it off.")
	fs.StringVar(&o.InstallationID, "installation-id", "", "This installation's id, carried by every machine it makes (Proxmox tag hf-inst-<id>, KubeVirt label hyperfleet.io/installation); installations sharing a hypervisor never touch each other's machines. 1-63 lowercase letters, digits or '-'. Default: the UID of the operator's namespace.")
	o.Cyberdesk.bindFlags(fs)
	o.Hourglass.bindFlags(fs)
	o.Runners.bindFlags(fs)
	o.Attestation.bindFlags(fs)
}

// Complete fills defaults from the environment and checks the values.
func (o *Options) Complete() error {
	if o.OperatorNamespace == "" {
		o.OperatorNamespace = detectNamespace()
	}
	if o.LeaderElectionNamespace == "" {
		o.LeaderElectionNamespace = o.OperatorNamespace
	}
	if o.Identity == "" {
		o.Identity = os.Getenv("POD_NAME")
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("leader election needs an identity: set POD_NAME (hostname lookup failed: %w)", err)
		}
		o.Identity = host
	}
	if err := checkControllers(o.Controllers); err != nil {
		return err
	}
	if err := o.Attestation.complete(); err != nil {
		return err
	}
	if err := o.Cyberdesk.complete(o.Namespaces); err != nil {
		return err
	}
	if o.InstallationID != "" {
		if err := providers.ValidateInstallation(o.InstallationID); err != nil {
			return fmt.Errorf("--installation-id: %w", err)
		}
	}
	if o.LeaderElect && (o.RetryPeriod >= o.RenewDeadline || o.RenewDeadline >= o.LeaseDuration) {
		return errors.New("leader election needs retry-period < renew-deadline < lease-duration")
	}
	return nil
}

func detectNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile(inClusterNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(data)); ns != "" {
			return ns
		}
	}
	return "hyperfleet-system"
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
