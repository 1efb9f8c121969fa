package manager

import (
	"flag"
	"fmt"
	"time"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/reconcilers/executor"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
)

// HourglassOptions configure the Performer and HourglassExecutor reconcilers.
type HourglassOptions struct {
	// PerformerPendingTimeout is how long a performer Pod may stay Pending
	// (5 min): bound to a node before it is replaced, waiting for one
	// before the Performer is marked Stalled.
	PerformerPendingTimeout time.Duration
	// PlacementFile names a YAML file overriding the GPU and TEE placement
	// table (docs/hourglass.md); empty keeps the built-in table. Mount it
	// from a ConfigMap: kustomize's configMapGenerator renames the ConfigMap
	// on every change, which restarts the operator with the new table.
	PlacementFile string
	// ClusterDomain is the DNS suffix of the performers' Services.
	ClusterDomain string
	// Clock drives the Pending timeout; nil is the real clock. Tests set a fake.
	Clock clock.PassiveClock
}

func (o *HourglassOptions) bindFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.PerformerPendingTimeout, "hourglass-performer-pending-timeout", performer.DefaultPendingTimeout,
		"How long a Performer's Pod may stay Pending: bound to a node that does not start it, before it is deleted and made again (a Warning event); waiting for a node, before the Performer is marked Stalled (PodPendingTimeout; the Pod is kept for the scheduler).")
	fs.StringVar(&o.PlacementFile, "hourglass-placement-file", "",
		"YAML file overriding how Performers' hardwareRequirements become placement: the GPU node label, resource and tolerations, and per TEE type (sgx, sev, tdx) the node selector, tolerations and runtime class. Default: the built-in table (docs/hourglass.md).")
	fs.StringVar(&o.ClusterDomain, "hourglass-cluster-domain", performer.DefaultClusterDomain,
		"DNS suffix of the cluster's Services, for the performers' DNS names and gRPC endpoints.")
}

// setupHourglass registers the Performer and HourglassExecutor reconcilers.
// A placement file that does not parse stops the operator at start: better
// than placing workloads on the wrong hardware.
func setupHourglass(mgr ctrl.Manager, o Options) error {
	h := o.Hourglass
	placement, err := performer.LoadPlacement(h.PlacementFile)
	if err != nil {
		return fmt.Errorf("--hourglass-placement-file: %w", err)
	}
	if err := (&performer.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("performer"), Clock: h.Clock,
		Placement: placement, PendingTimeout: h.PerformerPendingTimeout, ClusterDomain: h.ClusterDomain,
		MaxConcurrentReconciles: o.Workers.For(WorkersPerformer),
	}).SetupWithManager(mgr); err != nil {
		return err
	}
	return (&executor.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("hourglassexecutor"), ClusterDomain: h.ClusterDomain,
		MaxConcurrentReconciles: o.Workers.For(WorkersExecutor),
	}).SetupWithManager(mgr)
}
