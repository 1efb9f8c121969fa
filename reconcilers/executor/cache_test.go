package executor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/reconcilers/executor"
)

// The manager's cache holds the Deployments and ConfigMaps the operator
// made and none of the others: their number does not grow its memory.
func TestCacheHoldsOnlyOwnedObjects(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// Made first, so once the cache shows the executor's objects (made
	// later, delivered later on the same watches) it would show these too,
	// were they selected.
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stranger"}, Data: map[string]string{"k": "v"}})
	labels := map[string]string{"app": "stranger"}
	e.create(&appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "stranger"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/other"}}},
			},
		},
	})
	e.create(keysSecret("operator-keys", true))
	e.create(testExecutor("cached"))
	e.waitDeployment("cached", func(*appsv1.Deployment) bool { return true })
	eventually.That(t, 10*time.Second, func() (bool, string) {
		for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.ConfigMap{}} {
			name := "cached"
			if _, ok := obj.(*corev1.ConfigMap); ok {
				name = "cached-config"
			}
			if err := mgr.GetCache().Get(ctx, client.ObjectKey{Namespace: e.ns, Name: name}, obj); err != nil {
				return false, fmt.Sprintf("%T %s from the cache: %v", obj, name, err)
			}
			if obj.GetLabels()[meta.ManagedByLabel] != meta.ManagedByValue {
				return false, fmt.Sprintf("%T %s labels = %v", obj, name, obj.GetLabels())
			}
		}
		return true, ""
	})
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.ConfigMap{}} {
		key := client.ObjectKey{Namespace: e.ns, Name: "stranger"}
		if err := mgr.GetCache().Get(ctx, key, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T stranger from the cache: err = %v, want NotFound", obj, err)
		}
		if err := mgr.GetAPIReader().Get(ctx, key, obj); err != nil {
			t.Errorf("%T stranger through the APIReader: %v", obj, err)
		}
	}
}

// A ConfigMap the original Hourglass operator made, controlled by the
// executor but without the managed-by label, is invisible to the cache. It
// is found through the API server and adopted: the apply adds the label.
func TestConfigMapWithoutTheLabelIsAdopted(t *testing.T) {
	e := newEnv(t)
	e.create(keysSecret("operator-keys", true))
	// A keys mount over the configuration file is refused before anything
	// is applied: the executor exists (its UID is needed for the owner
	// reference) with nothing of ours.
	// Held, so the roll is still on when the test looks for it.
	x := testExecutor("legacy", hold, func(x *hourglassv1alpha1.HourglassExecutor) { x.Spec.OperatorKeys.MountPath = executor.ConfigPath })
	e.create(x)
	e.waitReason("legacy", meta.InvalidSpecReason)
	e.create(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "legacy-config",
			Labels: map[string]string{executor.LabelApp: "hourglass-executor", executor.LabelName: "legacy"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: hourglassv1alpha1.GroupVersion.String(), Kind: "HourglassExecutor", Name: x.Name, UID: x.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Data: map[string]string{executor.ConfigKey: "written by the original operator"},
	})

	e.updateExecutor("legacy", func(x *hourglassv1alpha1.HourglassExecutor) { x.Spec.OperatorKeys.MountPath = "" })
	e.waitReason("legacy", executor.ReasonRollingOut)
	cm := &corev1.ConfigMap{}
	if err := e.get("legacy-config", cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels[meta.ManagedByLabel] != meta.ManagedByValue || cm.Data[executor.ConfigKey] == "written by the original operator" {
		t.Errorf("ConfigMap legacy-config: labels %v, data %v; want it adopted", cm.Labels, cm.Data)
	}
}
