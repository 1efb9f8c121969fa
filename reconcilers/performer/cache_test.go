package performer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
)

// The manager's cache holds the Pods and Services the operator made and
// none of the others: their number does not grow the operator's memory.
func TestCacheHoldsOnlyOwnedPods(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// Made first, so once the cache shows the Performer's Pod (made later,
	// delivered later on the same watch) it would show this one too, were
	// it selected.
	e.create(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stranger", Labels: map[string]string{performer.LabelApp: "other"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/other"}}},
	})
	e.create(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "stranger"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	})
	e.performer("cached")
	pod := e.waitPod("cached", 20*time.Second, anyPod)
	e.service("cached")
	eventually.That(t, 10*time.Second, func() (bool, string) {
		err := mgr.GetCache().Get(ctx, client.ObjectKey{Namespace: e.ns, Name: pod.Name}, &corev1.Pod{})
		if err != nil {
			return false, fmt.Sprintf("the Performer's Pod from the cache: %v", err)
		}
		err = mgr.GetCache().Get(ctx, client.ObjectKey{Namespace: e.ns, Name: performer.ServiceName("cached")}, &corev1.Service{})
		return err == nil, fmt.Sprintf("the Performer's Service from the cache: %v", err)
	})
	if pod.Labels[meta.ManagedByLabel] != meta.ManagedByValue {
		t.Errorf("the Performer's Pod labels = %v, want %s=%s", pod.Labels, meta.ManagedByLabel, meta.ManagedByValue)
	}
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.Service{}} {
		key := client.ObjectKey{Namespace: e.ns, Name: "stranger"}
		if err := mgr.GetCache().Get(ctx, key, obj); !isGone(err) {
			t.Errorf("%T stranger from the cache: err = %v, want NotFound", obj, err)
		}
		if err := mgr.GetAPIReader().Get(ctx, key, obj); err != nil {
			t.Errorf("%T stranger through the APIReader: %v", obj, err)
		}
	}
	var list corev1.PodList
	if err := mgr.GetCache().List(ctx, &list, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Name == "stranger" {
			t.Errorf("the cache lists Pod stranger")
		}
	}
}

// A Pod the original Hourglass operator made carries no managed-by label,
// so the cache does not show it. A new operator process labels it (once per
// Performer), then rolls as from any older revision: the old Pod serves
// until the new one is Ready, and is removed then; no second Pod of the new
// revision is made, and the old one is not left running beside it.
func TestPodWithoutTheLabelIsAdopted(t *testing.T) {
	e := newEnv(t)
	// An invalid custom label is refused before any Pod is made: the
	// Performer exists (its UID is needed for the owner reference) with no
	// Pod of ours.
	p := e.performer("legacy", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{CustomLabels: map[string]string{"bad key!": "x"}}
	})
	e.waitReason("legacy", performer.ReasonInvalidSpec, 20*time.Second)

	e.create(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "performer-legacy-original",
			Labels:      map[string]string{performer.LabelApp: "hourglass-performer", performer.LabelPerformer: "legacy"},
			Annotations: map[string]string{performer.AnnotationVersion: "v0.9.0"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: hourglassv1alpha1.GroupVersion.String(), Kind: "Performer", Name: p.Name, UID: p.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "performer", Image: "ghcr.io/example/avs-performer:v0.9.0",
			Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8080}},
		}}},
	})
	// The scheduler places it and kwok starts it, as the kubelet would have.
	eventually.That(t, 20*time.Second, func() (bool, string) {
		pod := e.pod("performer-legacy-original")
		return podReady(*pod), fmt.Sprintf("original Pod on %q, phase %s", pod.Spec.NodeName, pod.Status.Phase)
	})

	// What a restart of the operator forgets; the spec fix starts the roll.
	performer.ForgetAdoptions(reconciler)
	e.update("legacy", func(p *hourglassv1alpha1.Performer) { p.Spec.HardwareRequirements = nil; hold(p) })

	fresh := e.waitPod("legacy", 30*time.Second, func(p corev1.Pod) bool { return p.Labels[performer.LabelTemplateHash] != "" })
	legacy := &corev1.Pod{}
	if err := e.get("performer-legacy-original", legacy); err != nil {
		t.Fatalf("the original Pod: %v", err)
	}
	if legacy.Labels[meta.ManagedByLabel] != meta.ManagedByValue || !legacy.DeletionTimestamp.IsZero() {
		t.Errorf("the original Pod: labels %v, deleting %v; want labelled and still serving", legacy.Labels, legacy.DeletionTimestamp)
	}
	// Until the new Pod is Ready the Service routes to the original one.
	svc := e.service("legacy")
	if _, ok := svc.Spec.Selector[performer.LabelTemplateHash]; ok {
		t.Errorf("Service selector = %v, want the Performer alone while the original Pod serves", svc.Spec.Selector)
	}
	if n := len(e.livePods("legacy")); n != 2 {
		t.Errorf("live Pods = %d, want the original and one new", n)
	}

	e.release(fresh.Name)
	e.waitReason("legacy", performer.ReasonServing, 20*time.Second)
	eventually.That(t, 20*time.Second, func() (bool, string) {
		pods := e.livePods("legacy")
		return len(pods) == 1 && pods[0].Name == fresh.Name, fmt.Sprintf("%d live Pods", len(pods))
	})
	svc = e.service("legacy")
	if svc.Spec.Selector[performer.LabelTemplateHash] != fresh.Labels[performer.LabelTemplateHash] {
		t.Errorf("Service selector = %v, want the new revision", svc.Spec.Selector)
	}
}
