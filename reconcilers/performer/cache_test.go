package performer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
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

// A Performer of the original operator's whose status is empty (restored
// from a backup without it, say) is not listed for Pods of that operator on
// a new operator's first look, as a new Performer is not. Its Service is
// found when ours is made, and then nothing is routed until the Pods are
// looked for: the original Pod keeps serving until ours is Ready, and is
// removed then.
func TestOriginalPerformerWithoutStatusIsAdopted(t *testing.T) {
	e := newEnv(t)
	p := e.performer("nostatus", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{CustomLabels: map[string]string{"bad key!": "x"}}
	})
	e.waitReason("nostatus", performer.ReasonInvalidSpec, 20*time.Second)
	owner := []metav1.OwnerReference{{
		APIVersion: hourglassv1alpha1.GroupVersion.String(), Kind: "Performer", Name: p.Name, UID: p.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	original := map[string]string{performer.LabelApp: "hourglass-performer", performer.LabelPerformer: "nostatus"}
	e.create(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "performer-nostatus-original", Labels: original, OwnerReferences: owner},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "performer", Image: "ghcr.io/example/avs-performer:v0.9.0",
			Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 8080}},
		}}},
	})
	e.create(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: performer.ServiceName("nostatus"), Labels: original, OwnerReferences: owner},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{performer.LabelPerformer: "nostatus"},
			Ports:    []corev1.ServicePort{{Name: "grpc", Port: 8080, TargetPort: intstr.FromString("grpc")}},
		},
	})
	eventually.That(t, 20*time.Second, func() (bool, string) {
		pod := e.pod("performer-nostatus-original")
		return podReady(*pod), fmt.Sprintf("original Pod on %q, phase %s", pod.Spec.NodeName, pod.Status.Phase)
	})

	// A restart, and the status gone: the operator first sees the
	// Performer with an empty status, as it sees a new one. (A status
	// write alone starts no reconcile: the spec fix does.)
	performer.ForgetAdoptions(reconciler)
	live := &hourglassv1alpha1.Performer{}
	if err := e.get("nostatus", live); err != nil {
		t.Fatal(err)
	}
	live.Status = hourglassv1alpha1.PerformerStatus{}
	if err := e.c.Status().Update(context.Background(), live); err != nil {
		t.Fatalf("clearing the status: %v", err)
	}
	e.update("nostatus", func(p *hourglassv1alpha1.Performer) { p.Spec.HardwareRequirements = nil; hold(p) })

	fresh := e.waitPod("nostatus", 30*time.Second, func(p corev1.Pod) bool { return p.Labels[performer.LabelTemplateHash] != "" })
	eventually.That(t, 20*time.Second, func() (bool, string) {
		legacy := e.pod("performer-nostatus-original")
		return legacy.Labels[meta.ManagedByLabel] == meta.ManagedByValue, fmt.Sprintf("original Pod labels %v", legacy.Labels)
	})
	// Until the new Pod is Ready the Service routes to the original one,
	// and never moved off it.
	for range 10 {
		svc := e.service("nostatus")
		if h, ok := svc.Spec.Selector[performer.LabelTemplateHash]; ok {
			t.Fatalf("Service selector = %v (revision %s), want the Performer alone while the original Pod serves", svc.Spec.Selector, h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if legacy := e.pod("performer-nostatus-original"); !legacy.DeletionTimestamp.IsZero() {
		t.Errorf("the original Pod is being deleted while ours is not Ready")
	}

	e.release(fresh.Name)
	e.waitReason("nostatus", performer.ReasonServing, 20*time.Second)
	eventually.That(t, 20*time.Second, func() (bool, string) {
		pods := e.livePods("nostatus")
		return len(pods) == 1 && pods[0].Name == fresh.Name, fmt.Sprintf("%d live Pods", len(pods))
	})
	if svc := e.service("nostatus"); svc.Spec.Selector[performer.LabelTemplateHash] != fresh.Labels[performer.LabelTemplateHash] {
		t.Errorf("Service selector = %v, want the new revision", svc.Spec.Selector)
	}
}

// firstPodOf is the first Pod the reconciler would make for the Performer
// once fix is applied to it, owned as it would own it.
func (e *env) firstPodOf(name string, fix func(*hourglassv1alpha1.Performer), owned bool) *corev1.Pod {
	e.t.Helper()
	live := &hourglassv1alpha1.Performer{}
	if err := e.get(name, live); err != nil {
		e.t.Fatal(err)
	}
	fixed := live.DeepCopy()
	fix(fixed)
	pod, err := performer.FirstPod(reconciler, fixed)
	if err != nil {
		e.t.Fatal(err)
	}
	if owned {
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: hourglassv1alpha1.GroupVersion.String(), Kind: "Performer", Name: live.Name, UID: live.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}
	}
	return pod
}

// A new leader whose cache does not show the Pod the leader before it made
// a moment before handing over, and which remembers nothing of it, makes
// no second one: the first Pod's name is fixed, the API server refuses the
// create, and the Pod read then is the Performer's own, waited for.
func TestNoTwinOfAnEarlierLeadersPod(t *testing.T) {
	e := newEnv(t)
	e.performer("handover", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{CustomLabels: map[string]string{"bad key!": "x"}}
	})
	e.waitReason("handover", performer.ReasonInvalidSpec, 20*time.Second)
	fix := func(p *hourglassv1alpha1.Performer) { p.Spec.HardwareRequirements = nil; hold(p) }
	// The earlier leader's Pod, without the managed-by label so that this
	// cache never shows it: a cache that has not caught up yet.
	earlier := e.firstPodOf("handover", fix, true)
	delete(earlier.Labels, meta.ManagedByLabel)
	e.create(earlier)
	live := &hourglassv1alpha1.Performer{}
	if err := e.get("handover", live); err != nil {
		t.Fatal(err)
	}
	performer.ForgetAdoptions(reconciler)
	performer.MarkAdopted(reconciler, live)
	e.update("handover", fix)

	e.waitReason("handover", performer.ReasonPodStarting, 20*time.Second)
	for range 20 {
		if pods := e.livePods("handover"); len(pods) != 1 || pods[0].Name != earlier.Name {
			names := []string{}
			for _, p := range pods {
				names = append(names, p.Name)
			}
			t.Fatalf("live Pods %v, want the earlier leader's %s alone", names, earlier.Name)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The cache catches up; the Pod serves.
	e.relabel(earlier.Name, meta.ManagedByLabel, meta.ManagedByValue)
	e.release(earlier.Name)
	got := e.waitReason("handover", performer.ReasonServing, 20*time.Second)
	if got.Status.PodName != earlier.Name {
		t.Errorf("status.podName = %q, want %q", got.Status.PodName, earlier.Name)
	}
	if n := len(e.livePods("handover")); n != 1 {
		t.Errorf("live Pods = %d, want 1", n)
	}
}

// Someone else's Pod under the name of a Performer's first Pod is refused,
// not taken over and not doubled: the Performer is Stalled, saying so.
func TestSomeoneElsesPodUnderTheFirstPodsName(t *testing.T) {
	e := newEnv(t)
	e.performer("squat", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{CustomLabels: map[string]string{"bad key!": "x"}}
	})
	e.waitReason("squat", performer.ReasonInvalidSpec, 20*time.Second)
	fix := func(p *hourglassv1alpha1.Performer) { p.Spec.HardwareRequirements = nil; hold(p) }
	squatter := e.firstPodOf("squat", fix, false)
	squatter.Labels = map[string]string{performer.LabelApp: "other"}
	e.create(squatter)
	e.update("squat", fix)

	got := e.waitReason("squat", performer.ReasonObjectConflict, 20*time.Second)
	if c := apimeta.FindStatusCondition(got.Status.Conditions, meta.ReadyCondition); c == nil || !strings.Contains(c.Message, squatter.Name) {
		t.Errorf("Ready condition %+v, want it to name Pod %s", c, squatter.Name)
	}
	pod := e.pod(squatter.Name)
	if len(pod.OwnerReferences) != 0 || pod.Labels[meta.ManagedByLabel] != "" {
		t.Errorf("someone else's Pod: owners %v, labels %v; want it untouched", pod.OwnerReferences, pod.Labels)
	}
	if n := len(e.livePods("squat")); n != 0 {
		t.Errorf("the Performer's live Pods = %d, want none made beside someone else's", n)
	}
}

// relabel sets a label on a Pod.
func (e *env) relabel(name, key, value string) {
	e.t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, key, value)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}}
	if err := e.c.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e.t.Fatalf("labelling Pod %s: %v", name, err)
	}
}
