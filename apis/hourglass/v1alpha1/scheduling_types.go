package v1alpha1

import corev1 "k8s.io/api/core/v1"

// Scheduling places a workload's Pods on nodes.
type Scheduling struct {
	// NodeSelector the Pods' node must match.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Affinity of the Pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// Tolerations of the Pods.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// RuntimeClassName for the Pods, e.g. a TEE or GPU runtime.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
	// PriorityClassName for the Pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}
