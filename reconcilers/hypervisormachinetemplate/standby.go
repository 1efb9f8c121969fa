package hypervisormachinetemplate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// keepStandby keeps spec.standby.hot standby claims of the template that
// no claim took: it makes the missing ones, deletes the extra ones (those
// still starting first, then the youngest), and replaces the ones that
// ended (their machine failed, or reached spec.standby.maxAge) or were made
// for an older generation of the template. A standby claim a claim took is
// the taking claim's to finish with; it is only counted.
func (r *Reconciler) keepStandby(ctx context.Context, s *scope) (skeleton.Result, error) {
	t := s.template
	s.standby = t.Status.Standby // kept as it is if counting fails
	inUse, err := r.inUse(ctx, t)
	if err != nil {
		return skeleton.Continue(), err
	}
	plan, err := standby.PlanFor(t.Spec.Standby, t.Status.Standby, inUse, time.Now())
	if err != nil {
		s.standbyErr = err
		return skeleton.Continue(), nil
	}
	want := int(plan.Want)
	var list hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(t.Namespace), client.MatchingLabels{standby.TemplateLabel: t.Name}); err != nil {
		return skeleton.Continue(), fmt.Errorf("listing standby claims: %w", err)
	}
	counts := hypervisorv1alpha1.StandbyStatus{Want: plan.Want, Schedule: plan.Schedule, HeadroomPeak: plan.Peak, HeadroomSince: plan.Since}
	// Only the template's own (a claim carrying the label by hand is not
	// one of its machines), hot and warm kept apart.
	var hotClaims, warmClaims []hypervisorv1alpha1.MachineClaim
	for _, sb := range list.Items {
		switch {
		case !metav1.IsControlledBy(&sb, t):
		case standby.IsWarm(&sb):
			warmClaims = append(warmClaims, sb)
		default:
			hotClaims = append(hotClaims, sb)
		}
	}
	free := func(sb *hypervisorv1alpha1.MachineClaim) bool { return standby.Free(sb, t) }
	current := func(sb *hypervisorv1alpha1.MachineClaim) bool { return standby.Current(sb, t) }
	tally := standby.Sort(hotClaims, want, free, current)
	var wantWarm int
	if t.Spec.Standby != nil {
		wantWarm = int(t.Spec.Standby.Warm)
	}
	warm := standby.Sort(warmClaims, wantWarm, free, current)
	counts.Binding = tally.Binding + warm.Binding
	for _, sb := range append(tally.Retire, warm.Retire...) {
		err := r.Client.Delete(ctx, sb, client.Preconditions{UID: &sb.UID, ResourceVersion: &sb.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return skeleton.Continue(), fmt.Errorf("deleting standby claim %s: %w", sb.Name, err)
		}
		if err == nil {
			standby.CountIdle(sb, time.Now(), standby.OutcomeRetired)
		}
	}
	starting := len(tally.Starting) + len(warm.Starting)
	for i := range tally.Make + warm.Make {
		sb := r.standbyClaim(t, i >= tally.Make)
		if err := r.Client.Create(ctx, sb); err != nil {
			return skeleton.Continue(), fmt.Errorf("making a standby claim: %w", err)
		}
		r.Recorder.Eventf(t, sb, corev1.EventTypeNormal, "StandbyCreated", "Standby", "Making %s standby machine %s", kindOf(sb), sb.Name)
		starting++
	}
	//nolint:gosec // each at most standby.MaxHot
	counts.Hot, counts.Warm, counts.Starting = int32(len(tally.Hot)), int32(len(warm.Hot)), int32(starting)
	s.standby = &counts
	if want == 0 && wantWarm == 0 && counts.Binding == 0 && len(list.Items) == 0 && counts.HeadroomPeak == 0 && counts.Schedule == "" {
		s.standby = nil
	}
	if plan.Recheck > 0 {
		// The next window's start, or the headroom's next step down; at
		// least hourly, so a clock change is caught up.
		return skeleton.Requeue(min(plan.Recheck+time.Second, time.Hour)), nil
	}
	return skeleton.Continue(), nil
}

// inUse counts the template's claims that hold or wait for a machine, not
// standby ones: the demand the burst headroom follows. Without a headroom
// it is not needed.
func (r *Reconciler) inUse(ctx context.Context, t *hypervisorv1alpha1.HypervisorMachineTemplate) (int32, error) {
	if t.Spec.Standby == nil || t.Spec.Standby.BurstHeadroom == nil {
		return 0, nil
	}
	var list hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(t.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing the template's claims: %w", err)
	}
	var n int32
	for i := range list.Items {
		c := &list.Items[i]
		ref := c.Spec.TemplateRef
		if !ref.IsMachineTemplate() || ref.Name != t.Name || standby.IsStandby(c) || !c.DeletionTimestamp.IsZero() ||
			c.Status.Phase == hypervisorv1alpha1.MachineTerminated || c.Status.Phase == hypervisorv1alpha1.MachineFailed {
			continue
		}
		n++
	}
	return n, nil
}

// standbyClaim is a new standby claim of t, its maxLifetime spread below
// the template's maxAge (standby.Lifetime).
func (r *Reconciler) standbyClaim(t *hypervisorv1alpha1.HypervisorMachineTemplate, warm bool) *hypervisorv1alpha1.MachineClaim {
	name := t.Name + "-standby-" + utilrand.String(5)
	labels := map[string]string{standby.TemplateLabel: t.Name}
	if warm {
		name = t.Name + "-warm-" + utilrand.String(5)
		labels[standby.WarmLabel] = "true"
	}
	return &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   t.Namespace,
			Name:        name,
			Labels:      labels,
			Annotations: map[string]string{standby.GenerationAnnotation: strconv.FormatInt(t.Generation, 10)},
			Finalizers:  []string{hypervisorv1alpha1.MachineClaimFinalizer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: hypervisorv1alpha1.GroupVersion.String(), Kind: "HypervisorMachineTemplate",
				Name: t.Name, UID: t.UID, Controller: ptr.To(true),
			}},
		},
		Spec: hypervisorv1alpha1.MachineClaimSpec{
			TemplateRef: hypervisorv1alpha1.TemplateReference{Name: t.Name},
			MaxLifetime: &metav1.Duration{Duration: standby.Lifetime(name, standby.MaxAge(t))},
		},
	}
}

// templateOfStandby wakes the template that keeps a standby claim.
func templateOfStandby(_ context.Context, o client.Object) []reconcile.Request {
	name, ok := o.GetLabels()[standby.TemplateLabel]
	if !ok || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

func kindOf(sb *hypervisorv1alpha1.MachineClaim) string {
	if standby.IsWarm(sb) {
		return "warm"
	}
	return "hot"
}
