//go:build !hourglass

package manager

import (
	"cmp"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/cyberdesk"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisormachinetemplate"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
	"github.com/hyperfleet/hyperfleet/reconcilers/orphans"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
)

// AllControllers lists the reconcilers of this build: every one.
var AllControllers = everyController

// setupReconcilers registers the reconcilers o.Controllers names (all by
// default), sharing one credentials reader and one provider registry so a
// credential rotation reaches them all.
func setupReconcilers(mgr ctrl.Manager, o Options) error {
	creds := &credentials.Reader{Reader: mgr.GetAPIReader()}
	registry := &hypervisors.Registry{
		Credentials: creds,
		APIReader:   mgr.GetAPIReader(),
		Factories: map[hypervisorv1alpha1.ProviderType]hypervisors.Factory{
			hypervisorv1alpha1.ProviderProxmox: hypervisors.Proxmox(o.InstallationID),
			hypervisorv1alpha1.ProviderKubeVirt: hypervisors.KubeVirt(hypervisors.LocalCluster{
				Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Installation: o.InstallationID,
			}),
		},
	}
	// The desks' claims are made on the operator's own KubeVirt (Source),
	// whose machines the sweeper sweeps beside the clusters'.
	var desks *cyberdesk.Source
	var deskVMs *kubevirt.Provider
	var sources map[schema.GroupKind]machineclaim.Source
	var operatorHypervisors []orphans.OperatorHypervisor
	if o.runs(ControllerCyberdesk) {
		var err error
		if desks, deskVMs, err = deskSource(mgr, o); err != nil {
			return err
		}
		sources = map[schema.GroupKind]machineclaim.Source{cyberdeskv1alpha1.GroupVersion.WithKind(cyberdesk.OwnerKind).GroupKind(): desks}
		served, err := kubeVirtServed(mgr.GetRESTMapper())
		if err != nil {
			return err
		}
		if served {
			// Without KubeVirt there is nothing to sweep, and a sweep would
			// log its absence every minute; desks say it in their status.
			operatorHypervisors = []orphans.OperatorHypervisor{{Name: cyberdesk.ClusterName, Provider: deskVMs, Type: hypervisorv1alpha1.ProviderKubeVirt}}
		}
	}
	if o.runs(ControllerHypervisorCluster) {
		if err := (&hypervisorcluster.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("hypervisorcluster"),
			APIReader: mgr.GetAPIReader(), DeletionTimeout: o.ClusterDeletionTimeout,
			MaxConcurrentReconciles: o.Workers.For(WorkersHypervisorCluster),
		}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if o.runs(ControllerHypervisorMachineTemplate) {
		if err := (&hypervisormachinetemplate.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Recorder: mgr.GetEventRecorder("hypervisormachinetemplate"),
			MaxConcurrentReconciles: o.Workers.For(WorkersHypervisorMachineTemplate),
		}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if o.runs(ControllerMachineClaim) {
		attest, err := setupAttestation(mgr, o, creds)
		if err != nil {
			return err
		}
		if err := (&machineclaim.Reconciler{
			Client: mgr.GetClient(), Hypervisors: registry, Sources: sources, Credentials: creds, APIReader: mgr.GetAPIReader(), Attestation: attest,
			Recorder: mgr.GetEventRecorder("machineclaim"), Clock: o.MachineClaimClock,
			ObserveInterval: o.ObserveInterval, FinalizationTimeout: o.FinalizationTimeout,
			MaxConcurrentReconciles: o.Workers.For(WorkersMachineClaim),
			Runner:                  &machinespec.RunnerBoot{Defaults: o.Runners.Runner, AgentPath: cmp.Or(o.Runners.AgentPath, runnerpool.DefaultAgentPath)},
		}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if o.runs(ControllerOrphans) {
		if err := (&orphans.Sweeper{
			Client: mgr.GetClient(), Hypervisors: registry, Operator: operatorHypervisors, Recorder: mgr.GetEventRecorder("orphan-sweeper"),
			Interval: o.OrphanSweepInterval, Grace: o.OrphanGrace,
		}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if o.runs(ControllerCyberdesk) {
		if err := setupCyberdesk(mgr, o, creds, deskVMs); err != nil {
			return err
		}
	}
	if o.runs(ControllerRunnerPool) {
		if err := setupRunners(mgr, o, creds); err != nil {
			return err
		}
	}
	if o.runs(ControllerHourglass) {
		return setupHourglass(mgr, o)
	}
	return nil
}
