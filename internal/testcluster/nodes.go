package testcluster

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwokAnnotation marks the nodes kwok plays the kubelet for; kwok is started
// with --manage-nodes-with-annotation-selector on it.
const kwokAnnotation = "kwok.x-k8s.io/node"

// The simulated nodes. The labels and taints are those the Hourglass
// document's scheduling examples name, plus nvidia.com/gpu.product, the
// label the Performer reconciler selects a GPU type by (GPU feature
// discovery's name).
const (
	NodeGeneral1     = "general-1"
	NodeGeneral2     = "general-2"
	NodeGPU          = "gpu-a100-1"
	NodeSGX          = "sgx-1"
	NodeBottlerocket = "bottlerocket-1"

	// GPUResource is the extended resource the GPU node offers.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// GPUCount is how many GPUs the GPU node offers.
	GPUCount = 4
	// GPUProduct is the GPU node's nvidia.com/gpu.product, as GPU feature
	// discovery names an A100 (the samples' gpuType).
	GPUProduct = "NVIDIA-A100-SXM4-80GB"
	// Zone is every node's topology.kubernetes.io/zone.
	Zone = "eu-west-1a"
)

// Nodes are the simulated nodes a cluster starts with: two general ones, a
// GPU node (nvidia.com/gpu capacity and taint), an SGX node (its feature
// label and taint) and a Bottlerocket node (its OS label and taint).
func Nodes() []*corev1.Node {
	return []*corev1.Node{
		node(NodeGeneral1, nil, nil, nil),
		node(NodeGeneral2, nil, nil, nil),
		node(NodeGPU,
			map[string]string{"accelerator": "nvidia-tesla-a100", "nvidia.com/gpu.product": GPUProduct, "nvidia.com/gpu.present": "true"},
			[]corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}},
			corev1.ResourceList{GPUResource: *resource.NewQuantity(GPUCount, resource.DecimalSI)}),
		node(NodeSGX,
			map[string]string{"intel.feature.node.kubernetes.io/sgx": "true"},
			[]corev1.Taint{{Key: "sgx", Value: "enabled", Effect: corev1.TaintEffectNoSchedule}},
			nil),
		node(NodeBottlerocket,
			map[string]string{"node.kubernetes.io/os": "bottlerocket"},
			[]corev1.Taint{{Key: "bottlerocket", Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			nil),
	}
}

func node(name string, labels map[string]string, taints []corev1.Taint, extra corev1.ResourceList) *corev1.Node {
	all := map[string]string{
		"kubernetes.io/hostname":      name,
		"kubernetes.io/os":            "linux",
		"kubernetes.io/arch":          "amd64",
		"type":                        "kwok",
		"topology.kubernetes.io/zone": Zone,
	}
	for k, v := range labels {
		all[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	for k, v := range extra {
		capacity[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      all,
			Annotations: map[string]string{kwokAnnotation: "fake"},
		},
		Spec: corev1.NodeSpec{Taints: taints},
		// kwok's node-initialize stage keeps the capacity a node registers with.
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity.DeepCopy()},
	}
}
