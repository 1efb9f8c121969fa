package cyberdesk

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// StandbyTemplate is the desk template's name as its standby claims carry
// it (label standby.TemplateLabel). It is not a valid object name, so no
// HypervisorMachineTemplate's standby claims can carry it.
const StandbyTemplate = OwnerKind

// standbyGeneration is the desk template's generation as its standby
// claims record it: the ConfigMap has none of its own, so a template edit
// reaches hot desks through their age limit (Standby.MaxAge).
const standbyGeneration = 1

// Standby is how many hot desk machines the operator keeps in each
// namespace, and how old one may get. The platform sets it (flags), never a
// namespaced object: hot machines are the platform's cost, and a team gets
// them only in its own namespace, for its own desks.
type Standby struct {
	// Hot maps a namespace to its hot desk machines (0–standby.MaxHot).
	Hot map[string]int32
	// MaxAge is a hot desk machine's age limit; 0 is standby.DefaultMaxAge.
	MaxAge time.Duration
}

func (s Standby) hot(ns string) int32 { return s.Hot[ns] }

func (s Standby) maxAge() time.Duration {
	if s.MaxAge > 0 {
		return s.MaxAge
	}
	return standby.DefaultMaxAge
}

// template is the desk template as the claims of namespace ns see it: on
// the operator's KubeVirt, keeping that namespace's hot machines. configMap
// and key locate its VirtualMachine template.
func (s Standby) template(ns string, configMap types.NamespacedName, key string) *hypervisorv1alpha1.HypervisorMachineTemplate {
	t := &hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: configMap.Namespace, Name: StandbyTemplate, Generation: standbyGeneration},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: ClusterName},
			KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{
				TemplateConfigMapRef: &hypervisorv1alpha1.ConfigMapKeyReference{Name: configMap.Name, Key: key},
			},
		},
	}
	if hot := s.hot(ns); hot > 0 {
		t.Spec.Standby = &hypervisorv1alpha1.StandbySpec{Hot: hot, MaxAge: &metav1.Duration{Duration: s.maxAge()}}
	}
	return t
}

// free reports whether desk standby claim sb can be taken now
// (standby.Free against its namespace's desk template).
func (s Standby) free(sb *hypervisorv1alpha1.MachineClaim) bool {
	return standby.Free(sb, s.template(sb.Namespace, types.NamespacedName{}, ""))
}

// isDeskStandby reports whether c is a desk standby claim.
func isDeskStandby(c *hypervisorv1alpha1.MachineClaim) bool {
	return c.Labels[standby.TemplateLabel] == StandbyTemplate
}

// StandbyKeeper keeps each namespace's hot desk machines (Standby.Hot):
// standby claims of the desk template, which a desk with no user data of
// its own takes (the MachineClaim reconciler's take phase) instead of
// making its VM. It makes the missing ones, deletes extra, ended and stale
// ones, and those in a namespace the operator keeps none in (a claim
// labelled by hand).
type StandbyKeeper struct {
	Client   client.Client
	Recorder events.EventRecorder
	Standby  Standby
}

// +kubebuilder:rbac:groups=hypervisor.hyperfleet.io,resources=machineclaims,verbs=get;list;watch;create;delete

// SetupWithManager registers the keeper: one request per namespace, for
// every configured namespace at start and whenever a desk standby claim
// changes.
func (k *StandbyKeeper) SetupWithManager(mgr ctrl.Manager) error {
	registerStandbyMetrics(mgr.GetCache(), k.Standby)
	isStandby := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[standby.TemplateLabel] == StandbyTemplate })
	return ctrl.NewControllerManagedBy(mgr).
		Named("cyberdesk-standby").
		Watches(&hypervisorv1alpha1.MachineClaim{}, handler.EnqueueRequestsFromMapFunc(namespaceOf), builder.WithPredicates(isStandby)).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			for ns := range k.Standby.Hot {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: StandbyTemplate}})
			}
			return nil
		})).
		Complete(k)
}

func namespaceOf(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: StandbyTemplate}}}
}

// Reconcile keeps one namespace's hot desk machines.
func (k *StandbyKeeper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	var list hypervisorv1alpha1.MachineClaimList
	if err := k.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{standby.TemplateLabel: StandbyTemplate}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the desk standby claims of namespace %s: %w", ns, err)
	}
	t := k.Standby.template(ns, types.NamespacedName{}, "")
	tally := standby.Sort(list.Items, int(k.Standby.hot(ns)), k.Standby.free,
		func(sb *hypervisorv1alpha1.MachineClaim) bool { return standby.Current(sb, t) })
	now := time.Now()
	for _, sb := range tally.Retire {
		err := k.Client.Delete(ctx, sb, client.Preconditions{UID: &sb.UID, ResourceVersion: &sb.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return ctrl.Result{}, fmt.Errorf("deleting desk standby claim %s/%s: %w", ns, sb.Name, err)
		}
		if err == nil {
			standby.CountIdle(sb, now, standby.OutcomeRetired)
		}
	}
	for range tally.Make {
		sb := k.standbyClaim(ns)
		if err := k.Client.Create(ctx, sb); err != nil {
			return ctrl.Result{}, fmt.Errorf("making a desk standby claim in namespace %s: %w", ns, err)
		}
		k.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "StandbyCreated", "Standby",
			"Making a hot desk machine: namespace %s keeps %d (--cyberdesk-standby)", ns, k.Standby.hot(ns))
	}
	return ctrl.Result{}, nil
}

// standbyClaim is a new desk standby claim in ns: the desk template's
// machine with no user data, named like a desk's VM.
func (k *StandbyKeeper) standbyClaim(ns string) *hypervisorv1alpha1.MachineClaim {
	name := VMPrefix + "standby-" + utilrand.String(5)
	return &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ns,
			Name:        name,
			Labels:      map[string]string{standby.TemplateLabel: StandbyTemplate},
			Annotations: map[string]string{standby.GenerationAnnotation: strconv.Itoa(standbyGeneration)},
			Finalizers:  []string{hypervisorv1alpha1.MachineClaimFinalizer},
		},
		Spec: hypervisorv1alpha1.MachineClaimSpec{
			// Names no desk: the desk Source knows a standby claim by its
			// label.
			TemplateRef: hypervisorv1alpha1.TemplateReference{APIGroup: cyberdeskv1alpha1.GroupVersion.Group, Kind: OwnerKind, Name: StandbyTemplate},
			MachineName: name,
			MaxLifetime: &metav1.Duration{Duration: standby.Lifetime(name, k.Standby.maxAge())},
		},
	}
}
