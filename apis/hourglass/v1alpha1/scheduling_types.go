package v1alpha1

import corev1 "k8s.io/api/core/v1"

// Scheduling places a workload's Pods on nodes.
// +kubebuilder:validation:XValidation:rule="!has(self.runtimeClass) || !has(self.runtimeClassName) || self.runtimeClass == self.runtimeClassName",message="spec.scheduling.runtimeClass and spec.scheduling.runtimeClassName name different runtime classes: set one of them"
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
	// RuntimeClass is the original Hourglass operator's name for
	// runtimeClassName; either may be set (the same value in both is fine).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RuntimeClass *string `json:"runtimeClass,omitempty"`
	// PriorityClassName for the Pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// RuntimeClassFor is the runtime class the Pods run with: runtimeClassName,
// else the original operator's runtimeClass (the API server refuses the two
// differing). Nil when neither is set.
func (s *Scheduling) RuntimeClassFor() *string {
	switch {
	case s == nil:
		return nil
	case s.RuntimeClassName != nil && *s.RuntimeClassName != "":
		return s.RuntimeClassName
	case s.RuntimeClass != nil && *s.RuntimeClass != "":
		return s.RuntimeClass
	}
	return nil
}
