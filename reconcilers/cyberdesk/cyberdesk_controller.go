// Package cyberdesk reconciles Cyberdesks (cyberdesk.io/v1alpha1), the
// time-limited desktop VMs of the Kopf operator it replaces. A desk is a
// translator, as a RunnerPool is: it owns one MachineClaim, named after it,
// whose machine is the KubeVirt VirtualMachine "cyberdesk-<name>" made from
// the template ConfigMap on the operator's own KubeVirt (Source). The claim
// makes, follows, expires and deletes the VM, so a desk has the one
// lifecycle, deadline path and orphan sweeper every machine has; the desk
// keeps the claim's timeout in step with timeoutMs and shows the claim's
// state in the Kopf operator's words.
package cyberdesk

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/supabase"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Finalizer keeps a desk until its claim, and with it the VM and its
// cloud-init Secret, is deleted.
const Finalizer = "cyberdesk.io/vm-cleanup"

// OwnerKind marks the VMs of desks (their claims' machines), apart from
// those of other MachineClaims: the Kopf operator's VMs carry it too.
const OwnerKind = "Cyberdesk"

// VMPrefix starts every desk's VM name, as in the Kopf operator.
const VMPrefix = "cyberdesk-"

// Exporter receives every status change (Supabase, when configured).
type Exporter interface {
	Enqueue(supabase.Row)
}

// Reconciler reconciles Cyberdesks.
type Reconciler struct {
	Client client.Client
	// APIReader reads a desk's VM once, past the cache, for the UID its
	// status shows: once per desk, so no VirtualMachine informer is needed.
	APIReader client.Reader
	// Adopter hands a VM the Kopf operator or an earlier HyperFleet made
	// for a desk over to the desk's claim; nil: such a VM is left to the
	// claim's name check.
	Adopter  providers.OwnerChanger
	Recorder events.EventRecorder
	Clock    clock.Clock
	// Exporter, if set, gets the desk's status after every change.
	Exporter Exporter
	// FinalizationTimeout bounds how long a deleted desk waits for its
	// claim to go before it is released with a Warning event (10 min): the
	// claim's own deadline, and the orphan sweeper, then see to the VM.
	FinalizationTimeout     time.Duration
	MaxConcurrentReconciles int
	// Standby is the hot desk machines kept per namespace: a new desk
	// with no user data takes one when one is free.
	Standby Standby

	// counted remembers what of each desk was counted (its VM made, timed
	// out, removed). The status transitions say when to count; this keeps
	// a reconcile of a read the cache has not caught up with from counting
	// the same transition twice, and counts a released desk, whose status
	// cannot say it any more.
	counted skeleton.Memory[counts]
	// written keeps each desk's last written status until the cache shows
	// it: deciding on the older status would undo it.
	written skeleton.WrittenStatus[*cyberdeskv1alpha1.Cyberdesk]
}

// +kubebuilder:rbac:groups=cyberdesk.io,resources=cyberdesks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cyberdesk.io,resources=cyberdesks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cyberdesk.io,resources=cyberdesks/finalizers,verbs=update
// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims,verbs=get;list;watch;create;patch;delete
// The desk reads its VM for its UID; the VM's writes are its claim's, on
// the operator's KubeVirt (Source), whose rules are reconcilers/hypervisors'.
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get

// SetupWithManager registers the reconciler, its metrics and its watches:
// the desk and its claim.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.FinalizationTimeout == 0 {
		r.FinalizationTimeout = 10 * time.Minute
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 8
	}
	registerMetrics(mgr.GetCache())
	return ctrl.NewControllerManagedBy(mgr).
		For(&cyberdeskv1alpha1.Cyberdesk{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&hypervisorv1alpha1.MachineClaim{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// scope carries one reconcile's observations and decisions from the
// phases to computeStatus.
type scope struct {
	desk  *cyberdeskv1alpha1.Cyberdesk
	patch *skeleton.StatusPatch
	now   time.Time

	// claim is the desk's MachineClaim (nil: none yet, or gone).
	claim *hypervisorv1alpha1.MachineClaim
	// machine is the VM as the claim shows it (nil: not made yet).
	machine *providers.Machine
	// started and expiry: when the VM first ran, and when its timeoutMs
	// runs out.
	started, expiry *metav1.Time
	// blocked: the claim is stopped short, or the desk cannot have one.
	blocked *blocker
	// retire names why the VM is being removed (a Ready reason).
	retire string
	// deleteErr is why the VM's deletion has not gone through.
	deleteErr error
	// ended: the VM is gone, and the desk has ended.
	ended *ending
	// released: the finalizer is off; the desk may be gone.
	released bool
}

// blocker is what stopped a desk short, as the Ready condition says it.
type blocker struct {
	state           conditions.State
	reason, message string
	// phase is the phase the desk shows meanwhile ("": the one it had).
	phase cyberdeskv1alpha1.CyberdeskPhase
}

// ending is how a desk's VM went away.
type ending struct {
	// reason is a Ready reason (TimedOut, GuestShutdown, VMFailed, VMDeletedOutside).
	reason string
	// what happened to the VM.
	what string
	// failed: the desk failed (its claim did), whatever the reason.
	failed bool
}

// Reconcile drives one desk.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	started := r.Clock.Now()
	defer func() { operationDuration.WithLabelValues("reconcile").Observe(r.Clock.Since(started).Seconds()) }()
	return r.driver().Reconcile(ctx, req)
}

func (r *Reconciler) driver() *skeleton.Driver[*cyberdeskv1alpha1.Cyberdesk, *scope] {
	return &skeleton.Driver[*cyberdeskv1alpha1.Cyberdesk, *scope]{
		Client:   r.Client,
		Recorder: r.Recorder,
		Kind: skeleton.Kind[*cyberdeskv1alpha1.Cyberdesk, *scope]{
			New: func() *cyberdeskv1alpha1.Cyberdesk { return &cyberdeskv1alpha1.Cyberdesk{} },
			Scope: func(d *cyberdeskv1alpha1.Cyberdesk, patch *skeleton.StatusPatch) *scope {
				return &scope{desk: d, patch: patch, now: r.Clock.Now()}
			},
			Finalizer: Finalizer,
			// Every step starts from what exists (the claim) and what
			// status records, so a duplicate event or a restart repeats
			// nothing.
			Phases:   []skeleton.Phase[*scope]{r.ensureClaim, r.adoptVM, r.followClaim},
			Deletion: []skeleton.Phase[*scope]{r.finalize},
			Status:   computeStatus,
			Events: func(s *scope, read, written *cyberdeskv1alpha1.Cyberdesk, _ conditions.Summary) {
				r.recordEvents(s, read, written)
				if r.Exporter != nil && !statusEqual(read, written) {
					r.Exporter.Enqueue(row(written, s.now))
				}
			},
			Memory:  []skeleton.Forgetter{&r.counted},
			Written: &r.written,
			CopyStatus: func(dst, src *cyberdeskv1alpha1.Cyberdesk) {
				dst.Status = *src.Status.DeepCopy()
			},
		},
	}
}

// vmName is the desk's VM as its status records it: the hot machine it
// took, or its own, "cyberdesk-<name>".
func vmName(d *cyberdeskv1alpha1.Cyberdesk) string {
	if ref := d.Status.VirtualMachineRef; ref != nil && ref.Name != "" {
		return ref.Name
	}
	return fixedVMName(d)
}

// fixedVMName is the VM name a desk makes its own VM by, as the Kopf
// operator named it.
func fixedVMName(d *cyberdeskv1alpha1.Cyberdesk) string { return VMPrefix + d.Name }

// counts says which of a desk's one-time events were counted.
type counts struct{ created, timedOut, deleted bool }

// once reports whether the event of desk d that mark selects is counted
// now for the first time, and marks it.
func (r *Reconciler) once(d *cyberdeskv1alpha1.Cyberdesk, mark func(*counts) *bool) bool {
	c, _ := r.counted.Load(d)
	if *mark(&c) {
		return false
	}
	*mark(&c) = true
	r.counted.Store(d, c)
	return true
}
