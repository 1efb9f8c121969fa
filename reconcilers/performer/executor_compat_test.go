package performer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// A Performer written exactly as the Hourglass executor's own client
// writes it (testdata/executor: its JSON, every field of its PerformerSpec
// set) is stored unpruned, its Pod carries every setting, and status.ready
// turns true, with the grpcEndpoint the executor computes, once the Pod is
// Ready. Before, the tagged image was refused, five fields were pruned and
// ready never appeared, so the executor deleted the performer after five
// minutes.
func TestExecutorWrittenPerformer(t *testing.T) {
	e := newEnv(t)
	data, err := os.ReadFile("testdata/executor/performer.json")
	if err != nil {
		t.Fatal(err)
	}
	sent := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &sent.Object); err != nil {
		t.Fatal(err)
	}
	name := sent.GetName()
	sent.SetNamespace(e.ns)
	// What the Pod names must exist for admission to take it.
	ensureRuntimeClass(t, "hyperfleet-test-nvidia")
	ensurePriorityClass(t, "hyperfleet-test-avs")
	e.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "avs-performer"}})

	if err := e.c.Create(context.Background(), sent.DeepCopy(), client.FieldValidation("Strict")); err != nil {
		t.Fatalf("creating the executor's Performer: %v", err)
	}
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(sent.GroupVersionKind())
	if err := e.get(name, stored); err != nil {
		t.Fatal(err)
	}
	if missing := notKept(sent.Object["spec"], stored.Object["spec"], "spec"); len(missing) > 0 {
		t.Errorf("the API server did not keep %v", missing)
	}
	sentLabels, _, _ := unstructured.NestedFieldNoCopy(sent.Object, "metadata", "labels")
	storedLabels, _, _ := unstructured.NestedFieldNoCopy(stored.Object, "metadata", "labels")
	if missing := notKept(sentLabels, storedLabels, "metadata.labels"); len(missing) > 0 {
		t.Errorf("the API server did not keep %v", missing)
	}

	pod := e.waitPod(name, 30*time.Second, podReady)
	c := pod.Spec.Containers[0]
	if c.Image != "registry.example.com/avs/performer:v1.2.3" || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("image %q pull %q, want the executor's tagged image as given, Never", c.Image, c.ImagePullPolicy)
	}
	wantEnv := []corev1.EnvVar{
		{Name: "AVS_ADDRESS", Value: "0x4444444444444444444444444444444444444444"},
		{Name: "GRPC_PORT", Value: "8080"},
		{Name: "LOG_LEVEL", Value: "debug"},
		{Name: "API_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "avs-secrets"}, Key: "api-key"}}},
		{Name: "CHAIN_CONFIG", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "avs-config"}, Key: "chains.json"}}},
	}
	if !equality.Semantic.DeepEqual(c.Env, wantEnv) {
		t.Errorf("env = %+v, want %+v", c.Env, wantEnv)
	}
	if !slices.Equal(c.Args, []string{"--log-format=json"}) || !slices.Equal(c.Command, []string{"/usr/local/bin/performer"}) {
		t.Errorf("command %v args %v", c.Command, c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %v, want 8080", c.Ports)
	}
	for res, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "2", corev1.ResourceMemory: "4Gi", "nvidia.com/gpu": "1"} {
		if q := c.Resources.Limits[res]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("limit %s = %s, want %s", res, q.String(), want)
		}
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("cpu request = %s, want 500m", q.String())
	}
	s := pod.Spec
	if s.ServiceAccountName != "avs-performer" || s.PriorityClassName != "hyperfleet-test-avs" ||
		s.RuntimeClassName == nil || *s.RuntimeClassName != "hyperfleet-test-nvidia" ||
		!slices.Equal(s.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry-credentials"}}) {
		t.Errorf("pod spec: serviceAccount %q priorityClass %q runtimeClass %v pullSecrets %v",
			s.ServiceAccountName, s.PriorityClassName, s.RuntimeClassName, s.ImagePullSecrets)
	}
	for k, v := range map[string]string{"accelerator": "nvidia-tesla-a100", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.present": "true"} {
		if s.NodeSelector[k] != v {
			t.Errorf("nodeSelector %s = %q, want %q (%v)", k, s.NodeSelector[k], v, s.NodeSelector)
		}
	}
	if !hasToleration(pod, "nvidia.com/gpu") {
		t.Errorf("tolerations %v", s.Tolerations)
	}

	// The executor reads status.ready and dials grpcEndpoint.
	want := fmt.Sprintf("performer-%s.%s.svc.cluster.local:8080", name, e.ns)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(sent.GroupVersionKind())
		if err := e.get(name, got); err != nil {
			return false, err.Error()
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "ready")
		endpoint, _, _ := unstructured.NestedString(got.Object, "status", "grpcEndpoint")
		readyTime, _, _ := unstructured.NestedString(got.Object, "status", "readyTime")
		podName, _, _ := unstructured.NestedString(got.Object, "status", "podName")
		service, _, _ := unstructured.NestedString(got.Object, "status", "serviceName")
		return ready && endpoint == want && readyTime != "" && podName == pod.Name && service == "performer-"+name,
			fmt.Sprintf("status %v", got.Object["status"])
	})
}

// ensurePriorityClass installs a PriorityClass for the test's duration.
func ensurePriorityClass(t *testing.T, name string) {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: 1000}
	if err := testenv.Client().Create(context.Background(), pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.Client().Delete(context.Background(), pc) })
}
