// Package cyberdesk reconciles Cyberdesks (cyberdesk.io/v1alpha1), the
// time-limited desktop VMs of the Kopf operator it replaces: one KubeVirt
// VirtualMachine "cyberdesk-<name>" per desk, made from the template
// ConfigMap, shut down and removed when timeoutMs runs out or the desk is
// deleted.
//
// It drives the KubeVirt provider directly rather than through a
// MachineClaim: a desk's VM lives in the desk's own namespace from a
// cluster-wide template, which is the Kopf operator's contract, and needs no
// HypervisorCluster or HypervisorMachineTemplate in every user namespace.
package cyberdesk

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/providers/supabase"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Finalizer keeps a desk until its VM and cloud-init Secret are deleted.
const Finalizer = "cyberdesk.io/vm-cleanup"

// OwnerKind marks the VMs of desks, apart from those of MachineClaims.
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
	// Provider is a KubeVirt provider whose owner kind is OwnerKind.
	Provider providers.Hypervisor
	// APIReader reads uncached: the template ConfigMap, so an edit reaches
	// the next desk at once, and a desk the cache may show stale.
	APIReader client.Reader
	// TemplateConfigMap and TemplateKey locate the VirtualMachine template.
	TemplateConfigMap types.NamespacedName
	TemplateKey       string
	Recorder          events.EventRecorder
	Clock             clock.Clock
	// Exporter, if set, gets the desk's status after every change.
	Exporter Exporter
	// ObserveInterval bounds how long a running desk goes unobserved when
	// no VM event arrives (30 s).
	ObserveInterval time.Duration
	// FinalizationTimeout bounds how long a deleted desk waits for its VM's
	// deletion before it is released with a Warning event (10 min).
	FinalizationTimeout time.Duration
	// WatchVirtualMachines watches VMs and instances; off when the cluster
	// does not serve KubeVirt's API (desks then say so in their status).
	WatchVirtualMachines    bool
	MaxConcurrentReconciles int

	// counted remembers which of a desk's timeout and deletion were
	// counted: a reconcile triggered by a VM event can read the desk from a
	// cache that does not show the status just written, and must not count
	// twice. Only metrics depend on it; a restart may count once more.
	counted skeleton.Memory[counts]
	// written keeps each desk's last written status until the cache shows
	// it: deciding on the older status would undo it.
	written skeleton.WrittenStatus[*cyberdeskv1alpha1.Cyberdesk]
}

// counts says which of a desk's one-time events were counted.
type counts struct{ timeout, deleted bool }

// countTimeout reports whether desk d's timeout is being counted for the
// first time; countDelete the same for its VM's deletion.
func (r *Reconciler) countTimeout(d *cyberdeskv1alpha1.Cyberdesk) bool {
	c, _ := r.counted.Load(d)
	if c.timeout {
		return false
	}
	c.timeout = true
	r.counted.Store(d, c)
	return true
}

func (r *Reconciler) countDelete(d *cyberdeskv1alpha1.Cyberdesk) bool {
	c, _ := r.counted.Load(d)
	if c.deleted {
		return false
	}
	c.deleted = true
	r.counted.Store(d, c)
	return true
}

// +kubebuilder:rbac:groups=cyberdesk.io,resources=cyberdesks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cyberdesk.io,resources=cyberdesks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cyberdesk.io,resources=cyberdesks/finalizers,verbs=update
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;patch;delete

// SetupWithManager registers the reconciler, its metrics and its watches.
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
	registerMetrics(mgr.GetCache())
	b := ctrl.NewControllerManagedBy(mgr).
		For(&cyberdeskv1alpha1.Cyberdesk{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles})
	if r.WatchVirtualMachines {
		toDesk := handler.EnqueueRequestsFromMapFunc(deskOf)
		ours := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[kubevirt.LabelOwnerKind] == OwnerKind
		}))
		b = b.Watches(&kubevirtv1.VirtualMachine{}, toDesk, ours).
			Watches(&kubevirtv1.VirtualMachineInstance{}, toDesk, ours)
	}
	return b.Complete(r)
}

// deskOf maps a VM or instance to its desk, by the owner annotation the
// provider writes (the instance inherits the VM's template labels only, so
// the name is the fallback: cyberdesk-<desk>).
func deskOf(_ context.Context, o client.Object) []reconcile.Request {
	if ns, name, ok := strings.Cut(o.GetAnnotations()[kubevirt.AnnotationOwner], "/"); ok {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	}
	if name, ok := strings.CutPrefix(o.GetName(), VMPrefix); ok {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
	return nil
}

// scope carries one reconcile's observations and decisions from the
// phases to computeStatus.
type scope struct {
	desk  *cyberdeskv1alpha1.Cyberdesk
	patch *skeleton.StatusPatch
	now   time.Time

	// machine is the VM as observed or created (nil: not seen).
	machine *providers.Machine
	// vmMissing: the VM does not exist and never ran, so it is made.
	vmMissing bool
	// started and expiry: when the VM first ran, and when its timeoutMs
	// runs out.
	started, expiry *metav1.Time
	// blocked: a provider failure, or a VM name taken, stopped the desk.
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
}

// phases are the steps of a live desk, in order. Every step starts from
// what exists (the VM, its instance) and what status records, so a
// duplicate event or a restart repeats nothing.
func (r *Reconciler) phases() []skeleton.Phase[*scope] {
	return []skeleton.Phase[*scope]{r.observeVM, r.createVM, r.followVM, r.retireVM}
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
			Phases:    r.phases(),
			Deletion:  []skeleton.Phase[*scope]{r.finalize},
			Status:    computeStatus,
			Events: func(s *scope, read, written *cyberdeskv1alpha1.Cyberdesk, _ conditions.Summary) {
				r.recordEvents(read, written)
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

// finalize deletes the VM and its Secret, then releases the desk; past the
// deadline it releases it anyway with a Warning event, so an unreachable
// cluster cannot pin a deleted desk forever.
func (r *Reconciler) finalize(ctx context.Context, s *scope) (skeleton.Result, error) {
	d := s.desk
	t0 := r.Clock.Now()
	err := r.Provider.Delete(ctx, vmRef(d), owner(d))
	if errors.Is(err, providers.ErrNotOwned) {
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "NothingToDelete", "Delete",
			"VirtualMachine %s belongs to something else; left untouched", vmName(d))
		err = nil
	}
	if err != nil {
		if s.now.Before(skeleton.DeletionDeadline(d, r.FinalizationTimeout)) {
			if errors.Is(err, providers.ErrInProgress) {
				return skeleton.StopAndRequeue(time.Second), nil
			}
			s.deleteErr = err
			return skeleton.StopAndRequeue(max(providers.RetryAfter(err), 5*time.Second)), nil
		}
		r.Recorder.Eventf(d, nil, corev1.EventTypeWarning, "FinalizerDeadlineExceeded", "Delete",
			"Released after %s without confirming VM %s was deleted: %v; delete it by hand", r.FinalizationTimeout, vmName(d), err)
	} else if hasVM(d) && r.countDelete(d) {
		vmDeleted.Inc()
		operationDuration.WithLabelValues("delete").Observe(r.Clock.Since(t0).Seconds())
		r.Recorder.Eventf(d, nil, corev1.EventTypeNormal, "VMDeleted", "Delete", "VirtualMachine %s and its cloud-init Secret deleted", vmName(d))
	}
	if err := s.patch.ReleaseFinalizer(ctx, Finalizer); err != nil {
		return skeleton.Stop(), err
	}
	s.released = true
	return skeleton.Stop(), nil
}

func vmName(d *cyberdeskv1alpha1.Cyberdesk) string { return VMPrefix + d.Name }

func vmRef(d *cyberdeskv1alpha1.Cyberdesk) providers.MachineRef {
	return providers.MachineRef{Name: vmName(d), Namespace: d.Namespace}
}

func owner(d *cyberdeskv1alpha1.Cyberdesk) providers.Owner {
	return providers.Owner{UID: string(d.UID), Namespace: d.Namespace, Name: d.Name}
}
