// Package machineclaim reconciles MachineClaims: one machine per claim, made
// through the provider of the template's HypervisorCluster and taken through
// Pending → Provisioning → Running → Ready → Stopping → Terminated (or Failed).
package machineclaim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
)

// Finalizer keeps a claim until its machine is deleted (or the deadline passes).
const Finalizer = "hypervisor.hyperfleet.io/machine"

const templateRefIndex = "machineclaim.templateRef"

// Reconciler reconciles MachineClaims.
type Reconciler struct {
	Client      client.Client
	Hypervisors *hypervisors.Registry
	Recorder    events.EventRecorder
	Clock       clock.Clock
	// ObserveInterval is how often a running machine is looked at (30 s).
	ObserveInterval time.Duration
	// FinalizationTimeout bounds how long deletion waits for an unreachable
	// hypervisor before releasing the claim and leaving the machine to the
	// orphan sweeper (10 min).
	FinalizationTimeout time.Duration
	// MaxConcurrentReconciles is the number of workers.
	MaxConcurrentReconciles int

	backoff backoff
}

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims/finalizers,verbs=update

var registerMetrics sync.Once

// SetupWithManager registers the reconciler and its metrics.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.ObserveInterval == 0 {
		r.ObserveInterval = 30 * time.Second
	}
	if r.FinalizationTimeout == 0 {
		r.FinalizationTimeout = 10 * time.Minute
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 8
	}
	registerMetrics.Do(func() {
		metrics.Registry.MustRegister(provisionDuration, finalizerDeadlineExceeded, machinesCollector{reader: mgr.GetCache()})
	})
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hypervisorv1alpha1.MachineClaim{}, templateRefIndex,
		func(o client.Object) []string {
			return []string{o.(*hypervisorv1alpha1.MachineClaim).Spec.TemplateRef.Name}
		}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&hypervisorv1alpha1.MachineClaim{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&hypervisorv1alpha1.HypervisorMachineTemplate{}, handler.EnqueueRequestsFromMapFunc(r.claimsForTemplate)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
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

// scope carries one reconcile's state between phases and into the status.
type scope struct {
	claim    *hypervisorv1alpha1.MachineClaim
	template *hypervisorv1alpha1.HypervisorMachineTemplate
	cluster  *hypervisorv1alpha1.HypervisorCluster
	provider providers.Hypervisor
	// outcome is what the status will say; phases set it.
	outcome outcome
	now     time.Time
}

// Reconcile drives one claim.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	claim := &hypervisorv1alpha1.MachineClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, claim); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := claim.DeepCopy()
	s := &scope{claim: claim, now: r.Clock.Now()}
	defer func() {
		r.setStatus(s)
		r.recordTransition(before, claim, s)
		if err := r.patchStatus(ctx, before, claim, s); err != nil && retErr == nil {
			retErr = err
		}
	}()

	if !claim.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, s)
	}
	if !controllerutil.ContainsFinalizer(claim, Finalizer) {
		patch := client.MergeFrom(claim.DeepCopy())
		controllerutil.AddFinalizer(claim, Finalizer)
		if err := r.Client.Patch(ctx, claim, patch); err != nil {
			return ctrl.Result{}, err
		}
		before.Finalizers = claim.Finalizers
		before.ResourceVersion = claim.ResourceVersion
	}
	return r.reconcilePhases(ctx, s)
}

// finalize deletes the machine, then releases the claim. Past the deadline
// the claim is released anyway — with a Warning event, a metric and the
// machine left to the orphan sweeper — so an unreachable hypervisor cannot
// pin it forever.
func (r *Reconciler) finalize(ctx context.Context, s *scope) (ctrl.Result, error) {
	claim := s.claim
	if !controllerutil.ContainsFinalizer(claim, Finalizer) {
		return ctrl.Result{}, nil
	}
	ref := machineRef(claim)
	done := ref.Name == "" && ref.VMID == 0
	var err error
	if !done {
		s.outcome = stopping("deleting the machine because the claim is being deleted")
		err = r.deleteMachine(ctx, s)
		if errors.Is(err, providers.ErrNotOwned) {
			// The recorded VMID holds someone else's VM: nothing of ours to delete.
			r.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, "NothingToDelete", "Delete",
				"VMID %d holds a VM HyperFleet does not own; left untouched", ref.VMID)
			err = nil
		}
		done = err == nil
	}
	if !done {
		deadline := claim.DeletionTimestamp.Add(r.FinalizationTimeout)
		if s.now.Before(deadline) {
			if errors.Is(err, providers.ErrInProgress) {
				return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
			}
			s.outcome.message = fmt.Sprintf("deleting the machine failed, retrying until %s: %v", deadline.UTC().Format(time.RFC3339), err)
			return ctrl.Result{RequeueAfter: r.backoff.next(claim.UID, providers.RetryAfter(err))}, nil
		}
		finalizerDeadlineExceeded.WithLabelValues(string(claim.Status.Provider)).Inc()
		r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, "FinalizerDeadlineExceeded", "Delete",
			"Released after %s without confirming machine %s (VMID %d) was deleted: %v; the orphan sweeper deletes it once the hypervisor answers",
			r.FinalizationTimeout, ref.Name, ref.VMID, err)
	} else {
		r.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, "MachineDeleted", "Delete", "Machine %s deleted", ref.Name)
	}
	patch := client.MergeFrom(claim.DeepCopy())
	controllerutil.RemoveFinalizer(claim, Finalizer)
	r.backoff.reset(claim.UID)
	if err := r.Client.Patch(ctx, claim, patch); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	s.outcome.skipStatus = true
	return ctrl.Result{}, nil
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

func (r *Reconciler) patchStatus(ctx context.Context, before, claim *hypervisorv1alpha1.MachineClaim, s *scope) error {
	if s.outcome.skipStatus {
		return nil
	}
	return conditions.PatchStatus(ctx, r.Client, before, claim)
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
