package testcluster

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The simulated nodes carry the labels and taints the Hourglass document's
// scheduling examples select and tolerate, and kwok manages each of them.
func TestNodesMatchTheSchedulingExamples(t *testing.T) {
	byName := map[string]*corev1.Node{}
	for _, n := range Nodes() {
		byName[n.Name] = n
		if n.Annotations[kwokAnnotation] != "fake" {
			t.Errorf("%s lacks %s=fake: kwok would not manage it", n.Name, kwokAnnotation)
		}
	}
	for _, c := range []struct {
		node, label, value string
		taint              corev1.Taint
	}{
		{NodeGPU, "accelerator", "nvidia-tesla-a100", corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}},
		{NodeSGX, "intel.feature.node.kubernetes.io/sgx", "true", corev1.Taint{Key: "sgx", Value: "enabled", Effect: corev1.TaintEffectNoSchedule}},
		{NodeBottlerocket, "node.kubernetes.io/os", "bottlerocket", corev1.Taint{Key: "bottlerocket", Value: "true", Effect: corev1.TaintEffectNoSchedule}},
	} {
		n := byName[c.node]
		if n == nil {
			t.Fatalf("no node %s", c.node)
		}
		if n.Labels[c.label] != c.value {
			t.Errorf("%s: label %s = %q, want %q", c.node, c.label, n.Labels[c.label], c.value)
		}
		if len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != c.taint {
			t.Errorf("%s: taints %v, want %v", c.node, n.Spec.Taints, c.taint)
		}
	}
	if q := byName[NodeGPU].Status.Capacity[GPUResource]; q.Value() != GPUCount {
		t.Errorf("GPU node offers %v %s, want %d", q.String(), GPUResource, GPUCount)
	}
	for _, general := range []string{NodeGeneral1, NodeGeneral2} {
		if n := byName[general]; n == nil || len(n.Spec.Taints) != 0 {
			t.Errorf("general node %s missing or tainted", general)
		}
	}
}

// The Stages file holds the stages the package's controls rely on, each a
// kwok Stage for Pods.
func TestStagesFile(t *testing.T) {
	want := map[string]bool{"pod-ready": false, "pod-released": false, "pod-delete": false, "pod-evicted": false}
	for _, doc := range bytes.Split(podStages, []byte("\n---\n")) {
		var stage struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				ResourceRef struct {
					Kind string `json:"kind"`
				} `json:"resourceRef"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &stage); err != nil {
			t.Fatalf("stages/pods.yaml: %v", err)
		}
		if stage.Kind == "" {
			continue // the leading comment
		}
		if stage.Kind != "Stage" || stage.Spec.ResourceRef.Kind != "Pod" {
			t.Errorf("%s: kind %s for %s, want a Stage for Pods", stage.Metadata.Name, stage.Kind, stage.Spec.ResourceRef.Kind)
		}
		if _, ok := want[stage.Metadata.Name]; !ok {
			t.Errorf("unexpected stage %s", stage.Metadata.Name)
		}
		want[stage.Metadata.Name] = true
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("stage %s missing", name)
		}
	}
}
