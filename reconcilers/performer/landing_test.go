package performer_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/performer"
)

// Placement lands: the real scheduler puts each Performer on the one
// simulated node that fits it, and nowhere else. The GPU node's taint keeps
// plain performers off it; the GPU, SGX and Bottlerocket performers land on
// their nodes.
func TestPlacementLands(t *testing.T) {
	e := newEnv(t)
	e.performer("plain")
	e.performer("gpu", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{GPUType: testcluster.GPUProduct, GPUCount: 2}
	})
	e.performer("sgx", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: "sgx"}
	})
	e.performer("bottlerocket", func(p *hourglassv1alpha1.Performer) { p.Spec.Scheduling = bottlerocket(true) })

	for name, want := range map[string]func(string) bool{
		"plain":        isGeneral,
		"gpu":          func(n string) bool { return n == testcluster.NodeGPU },
		"sgx":          func(n string) bool { return n == testcluster.NodeSGX },
		"bottlerocket": func(n string) bool { return n == testcluster.NodeBottlerocket },
	} {
		got := e.waitReason(name, performer.ReasonServing, 30*time.Second)
		checkKstatus(t, got)
		pod := e.pod(got.Status.PodName)
		if !want(got.Status.NodeName) || pod.Spec.NodeName != got.Status.NodeName {
			t.Errorf("%s: status node %q, Pod on %q", name, got.Status.NodeName, pod.Spec.NodeName)
		}
		e.waitEndpoints(name, pod.Status.PodIP)
	}
}

// With no node that fits, the Performer stays Pending and says why, in the
// scheduler's own words from the Pod's PodScheduled condition: too many
// GPUs, a GPU type no node has, an SGX performer bigger than the SGX node,
// a Bottlerocket selector without the toleration for its taint.
func TestNoFitStaysPending(t *testing.T) {
	e := newEnv(t)
	e.performer("gpu-too-many", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{GPUType: testcluster.GPUProduct, GPUCount: testcluster.GPUCount + 1}
	})
	e.performer("gpu-other-type", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{GPUType: "NVIDIA-H100-80GB-HBM3", GPUCount: 1}
	})
	e.performer("sgx-too-big", func(p *hourglassv1alpha1.Performer) {
		p.Spec.HardwareRequirements = &hourglassv1alpha1.HardwareRequirements{TEERequired: true, TEEType: "sgx"}
		p.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
	})
	e.performer("bottlerocket-untolerated", func(p *hourglassv1alpha1.Performer) { p.Spec.Scheduling = bottlerocket(false) })

	for name, words := range map[string][]string{
		"gpu-too-many":             {"Insufficient nvidia.com/gpu"},
		"gpu-other-type":           {"didn't match Pod's node affinity/selector", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"},
		"sgx-too-big":              {"Insufficient cpu"},
		"bottlerocket-untolerated": {"untolerated taint", "bottlerocket"},
	} {
		got := e.waitReason(name, performer.ReasonUnschedulable, 30*time.Second)
		checkKstatus(t, got)
		if got.Status.Phase != hourglassv1alpha1.PerformerPending {
			t.Errorf("%s: phase %s, want Pending", name, got.Status.Phase)
		}
		pods := e.livePods(name)
		if len(pods) != 1 {
			t.Fatalf("%s: %d Pods, want 1", name, len(pods))
		}
		pod := pods[0]
		scheduled := podCondition(&pod, corev1.PodScheduled)
		if pod.Spec.NodeName != "" || scheduled == nil || scheduled.Reason != corev1.PodReasonUnschedulable {
			t.Fatalf("%s: Pod on %q, PodScheduled %+v; want unbound and Unschedulable", name, pod.Spec.NodeName, scheduled)
		}
		msg := findCondition(got, meta.ReadyCondition).Message
		if !strings.Contains(msg, strings.TrimSpace(scheduled.Message)) {
			t.Errorf("%s: Ready message %q does not carry the scheduler's %q", name, msg, scheduled.Message)
		}
		for _, w := range words {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: Ready message %q, want it to say %q", name, msg, w)
			}
		}
	}
}

// bottlerocket is the seed's Bottlerocket scheduling example, with or
// without the toleration for the nodes' taint.
func bottlerocket(tolerate bool) *hourglassv1alpha1.Scheduling {
	s := &hourglassv1alpha1.Scheduling{NodeSelector: map[string]string{"node.kubernetes.io/os": "bottlerocket"}}
	if tolerate {
		s.Tolerations = []corev1.Toleration{{Key: "bottlerocket", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	return s
}
