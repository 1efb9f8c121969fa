// Package machineclaim reconciles MachineClaims: one machine per claim, made
// through the provider of the template's HypervisorCluster and taken through
// Pending → Provisioning → Running → Ready → Stopping → Terminated (or Failed).
package machineclaim

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// Finalizer keeps a claim until its machine is deleted (or the deadline passes).
const Finalizer = hypervisorv1alpha1.MachineClaimFinalizer

const templateRefIndex = "machineclaim.templateRef"

// Reconciler reconciles MachineClaims.
type Reconciler struct {
	Client      client.Client
	Hypervisors *hypervisors.Registry
	// APIReader reads past the cache: KubeVirt templates held in
	// ConfigMaps, so an edit reaches the very next machine, and the claims
	// holding a static address, so two claims never keep the same one.
	APIReader client.Reader
	// Credentials reads spec.userDataSecretRef (a GET, label-gated).
	Credentials *credentials.Reader
	// Attestation is the SPIRE side of templates that ask for attestation;
	// nil: such claims stall, saying what to configure.
	Attestation *attestation.Registry
	Recorder    events.EventRecorder
	// Clock tells provisioning timeouts, expiries and the finalization
	// deadline (the real clock when nil); tests step a fake one instead of
	// waiting them out.
	Clock clock.PassiveClock
	// ObserveInterval is how often a running machine is looked at (30 s).
	ObserveInterval time.Duration
	// FinalizationTimeout bounds how long deletion waits for an unreachable
	// hypervisor before releasing the claim and leaving the machine to the
	// orphan sweeper (10 min).
	FinalizationTimeout time.Duration
	// Sources make the machines of claims whose spec.templateRef names a
	// kind other than HypervisorMachineTemplate, by that kind.
	Sources map[schema.GroupKind]Source
	// MaxConcurrentReconciles is the number of workers.
	MaxConcurrentReconciles int
	// Runner boots the machines of runner templates that attest, for
	// claims without user data of their own (machinespec.RunnerBoot); nil:
	// they boot with the template's user data.
	Runner *machinespec.RunnerBoot

	backoff backoff
	booting booting
	// bound: the standby claim this process bound for a claim, until the
	// cache shows the binding (standby.go).
	bound skeleton.Memory[binding]
	// attestSecrets: the claim's join-token Secret as read or made, until
	// its machine starts (attest.go).
	attestSecrets skeleton.Memory[*corev1.Secret]
	// binding: the standby claims this process binds or just bound, which
	// its other binds pass over (reservations.go).
	binding reservations
	// written: the status this process last wrote for each claim, until
	// the cache shows it. A claim is reconciled again at once by its own
	// objects' events (a standby claim deleted, a Secret handed over, the
	// attestation endpoint's write): from a cache behind its write, it
	// wrote its phase again and reported each transition again (about 3
	// Ready events a runner's claim in a burst of 100).
	written skeleton.WrittenStatus[*hypervisorv1alpha1.MachineClaim]
}

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims/finalizers,verbs=update

var registerMetrics sync.Once

// defaultWorkers is the MachineClaim reconciler's worker count unless
// --workers machineclaim=N says otherwise. A burst of runners needs many
// claims provisioned at once, and each spends most of its reconcile waiting
// on the API server: for 100 runners made within 1.5-2 s, the provider
// Create calls followed with p99 5.2 s at 8 workers, 3.6 s at 16 and 2.2 s
// at 32 (RUNNERS_N=100 go test -bench 'RunnerLatency/jobs=100/maxReplicas=100$'
// ./internal/bench/runners/, on a loaded 2-core machine).
const defaultWorkers = 32

// SetupWithManager registers the reconciler and its metrics.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.ObserveInterval == 0 {
		r.ObserveInterval = 30 * time.Second
	}
	if r.FinalizationTimeout == 0 {
		r.FinalizationTimeout = 10 * time.Minute
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = defaultWorkers
	}
	standby.RegisterMetrics()
	registerMetrics.Do(func() {
		metrics.Registry.MustRegister(provisionDuration, finalizerDeadlineExceeded, standbyBinds, standbyMisses,
			machinesCollector{reader: mgr.GetCache(), providers: r.Hypervisors.Providers()})
	})
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hypervisorv1alpha1.MachineClaim{}, templateRefIndex,
		func(o client.Object) []string {
			ref := o.(*hypervisorv1alpha1.MachineClaim).Spec.TemplateRef
			if !ref.IsMachineTemplate() {
				return nil // not a HypervisorMachineTemplate's claim
			}
			return []string{ref.Name}
		}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&hypervisorv1alpha1.MachineClaim{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, annotationsChanged, attestationChanged))).
		Watches(&hypervisorv1alpha1.HypervisorMachineTemplate{}, handler.EnqueueRequestsFromMapFunc(r.claimsForTemplate)).
		WatchesRawSource(source.Func(r.wakes)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// wakes enqueues the claims whose provider says their machine can move on
// (providers.Waker): a task ended, a clone slot was given to it. It is how a
// claim being made waits for the hypervisor without polling it. The queue
// deduplicates, so a wake for a claim already queued costs nothing.
func (r *Reconciler) wakes(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	r.Hypervisors.OnWake(func(o providers.Owner) {
		if o.Namespace == "" || o.Name == "" {
			return
		}
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.Namespace, Name: o.Name}})
	})
	return nil
}

// annotationsChanged passes a claim whose annotations changed (a nudge,
// kubectl annotate), except its owner's notes (NotesAnnotationPrefix):
// nothing here reads them, and a pool writes them as its runners go idle
// and busy.
var annotationsChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(withoutNotes(e.ObjectOld.GetAnnotations()), withoutNotes(e.ObjectNew.GetAnnotations()))
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func withoutNotes(annotations map[string]string) map[string]string {
	out := make(map[string]string, len(annotations))
	for k, v := range annotations {
		if !strings.HasPrefix(k, hypervisorv1alpha1.NotesAnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}

// attestationChanged passes a claim whose attestation phase changed: the
// credential endpoint wrote it, on whichever replica the machine reached,
// and the leader's reconcile turns it into the Attested condition. Other
// status writes are the reconciler's own and need no reconcile.
var attestationChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*hypervisorv1alpha1.MachineClaim)
		n, ok2 := e.ObjectNew.(*hypervisorv1alpha1.MachineClaim)
		return ok1 && ok2 && attestationPhase(o) != attestationPhase(n)
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func attestationPhase(c *hypervisorv1alpha1.MachineClaim) hypervisorv1alpha1.AttestationPhase {
	if c.Status.Attestation == nil {
		return ""
	}
	return c.Status.Attestation.Phase
}

func (r *Reconciler) claimsForTemplate(ctx context.Context, o client.Object) []reconcile.Request {
	var list hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{templateRefIndex: o.GetName()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, mc := range list.Items {
		// Only claims still waiting care about their template changing.
		if mc.Status.StartTime == nil {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&mc)})
		}
	}
	return reqs
}

// scope is one reconcile: what it read, and what its phases observed and
// decided. computeStatus derives the claim's status from it alone.
type scope struct {
	claim    *hypervisorv1alpha1.MachineClaim
	patch    *skeleton.StatusPatch
	now      time.Time
	template *hypervisorv1alpha1.HypervisorMachineTemplate
	cluster  *hypervisorv1alpha1.HypervisorCluster
	provider providers.Hypervisor
	// timeout is the finalization timeout, for the deletion message.
	timeout time.Duration

	// The facts, each recorded by one phase.

	// blocked: the claim cannot go on (a dependency missing or not ready,
	// a provider error, no free address).
	blocked *blocker
	// progress: what making the machine is at before the provider reports
	// on it (a reference chosen, an address taken).
	progress string
	// unrecorded: the machine's reference was chosen in this reconcile and
	// is not yet in status; it must be before a create call.
	unrecorded bool
	// machine: the machine as the provider last reported it.
	machine *providers.Machine
	// deletion: the machine is being deleted.
	deletion *deletion
	// ended: the machine is gone; how (TerminationReason says why).
	ended string
	// released: the finalizer was removed; nothing more is written.
	released bool
	// machineConfig: what the machine attests with, for its user data.
	machineConfig *spire.MachineConfig
	// attestRun: the command the attestation part runs (workload none).
	attestRun []string
}

// Reconcile drives one claim.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.driver().Reconcile(ctx, req)
}

func (r *Reconciler) driver() *skeleton.Driver[*hypervisorv1alpha1.MachineClaim, *scope] {
	return &skeleton.Driver[*hypervisorv1alpha1.MachineClaim, *scope]{
		Client:   r.Client,
		Recorder: r.Recorder,
		Kind: skeleton.Kind[*hypervisorv1alpha1.MachineClaim, *scope]{
			New: func() *hypervisorv1alpha1.MachineClaim { return &hypervisorv1alpha1.MachineClaim{} },
			Scope: func(claim *hypervisorv1alpha1.MachineClaim, patch *skeleton.StatusPatch) *scope {
				return &scope{claim: claim, patch: patch, now: r.Clock.Now(), timeout: r.FinalizationTimeout}
			},
			Finalizer: Finalizer,
			Phases: []skeleton.Phase[*scope]{
				r.ended, r.retire, r.resolve, r.take, r.deadlines, r.attestationDeadline, r.assignReference, r.ensureAddress, r.attest, r.provision, r.observe,
			},
			Deletion: []skeleton.Phase[*scope]{r.finalize},
			Status:   computeStatus,
			// The phase the claim was read in, not the one a Checkpoint
			// wrote on the way: the transition is the reconcile's.
			Events: func(s *scope, read, written *hypervisorv1alpha1.MachineClaim, summary conditions.Summary) {
				r.recordTransition(written, read.Status.Phase, summary, s)
			},
			Memory:  []skeleton.Forgetter{&r.backoff, &r.booting, &r.bound, &r.attestSecrets},
			Written: &r.written,
			CopyStatus: func(dst, src *hypervisorv1alpha1.MachineClaim) {
				dst.Status = *src.Status.DeepCopy()
			},
		},
	}
}

// deleteMachine asks the claim's cluster to delete the machine: nil once gone.
func (r *Reconciler) deleteMachine(ctx context.Context, s *scope) error {
	p, err := r.providerForClaim(ctx, s)
	if err != nil {
		return err
	}
	return p.Delete(ctx, machineRef(s.claim), owner(s.claim))
}

// providerForClaim finds the provider through the cluster recorded in status,
// so deletion reaches the right hypervisor even if the template is gone.
func (r *Reconciler) providerForClaim(ctx context.Context, s *scope) (providers.Hypervisor, error) {
	if s.provider != nil {
		return s.provider, nil
	}
	if !s.claim.Spec.TemplateRef.IsMachineTemplate() {
		src, err := r.source(s.claim)
		if err != nil {
			return nil, err
		}
		s.provider, _, _ = src.Hypervisor()
		return s.provider, nil
	}
	name := s.claim.Status.ClusterName
	if name == "" {
		// The machine was made but the status write that records its
		// cluster was lost (a crash, a racing deletion): the template says
		// which cluster it went to.
		t := &hypervisorv1alpha1.HypervisorMachineTemplate{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.claim.Namespace, Name: s.claim.Spec.TemplateRef.Name}, t); err != nil {
			return nil, fmt.Errorf("no cluster recorded for the machine, and its template is unreadable: %w", err)
		}
		name = t.Spec.ClusterRef.Name
	}
	cluster := &hypervisorv1alpha1.HypervisorCluster{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: s.claim.Namespace, Name: name}, cluster); err != nil {
		return nil, fmt.Errorf("reading HypervisorCluster %s: %w", name, err)
	}
	p, err := r.Hypervisors.For(ctx, cluster)
	if err != nil {
		return nil, err
	}
	s.cluster, s.provider = cluster, p
	return p, nil
}

func machineRef(c *hypervisorv1alpha1.MachineClaim) providers.MachineRef {
	ref := providers.MachineRef{Name: c.Status.MachineName, Node: c.Status.Node, Namespace: c.Namespace}
	if c.Status.VMID != nil {
		ref.VMID = int(*c.Status.VMID)
	}
	return ref
}

func owner(c *hypervisorv1alpha1.MachineClaim) providers.Owner {
	return providers.Owner{UID: string(c.UID), Namespace: c.Namespace, Name: c.Name}
}
