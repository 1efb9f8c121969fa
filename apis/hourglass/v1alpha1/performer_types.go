package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// PerformerPhase is the performer's one-word state.
// +kubebuilder:validation:Enum=Pending;Running;Upgrading;Failed;Terminating
type PerformerPhase string

const (
	PerformerPending     PerformerPhase = "Pending"
	PerformerRunning     PerformerPhase = "Running"
	PerformerUpgrading   PerformerPhase = "Upgrading"
	PerformerFailed      PerformerPhase = "Failed"
	PerformerTerminating PerformerPhase = "Terminating"
)

// TEEType is a trusted-execution technology.
// +kubebuilder:validation:Enum=sgx;sev;tdx
type TEEType string

// PerformerConfig is the performer container's runtime configuration.
type PerformerConfig struct {
	// GRPCPort the performer serves on; probes and the Service use it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=8080
	// +optional
	GRPCPort int32 `json:"grpcPort,omitempty"`
	// Env of the container.
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// EnvFrom of the container.
	// +listType=atomic
	// +optional
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`
	// Args of the container.
	// +listType=atomic
	// +optional
	Args []string `json:"args,omitempty"`
	// Command of the container (replaces the image's entrypoint).
	// +listType=atomic
	// +optional
	Command []string `json:"command,omitempty"`
}

// HardwareRequirements become real placement: GPU limits, TEE nodes.
// +kubebuilder:validation:XValidation:rule="!has(self.gpuType) || (has(self.gpuCount) && self.gpuCount > 0)",message="spec.hardwareRequirements.gpuCount must be at least 1 when gpuType is set"
// +kubebuilder:validation:XValidation:rule="!has(self.teeType) || (has(self.teeRequired) && self.teeRequired)",message="spec.hardwareRequirements.teeType requires teeRequired: true"
// +kubebuilder:validation:XValidation:rule="!has(self.teeRequired) || !self.teeRequired || has(self.teeType)",message="spec.hardwareRequirements.teeType (sgx, sev or tdx) is required when teeRequired is true"
type HardwareRequirements struct {
	// GPUType, e.g. nvidia-a100; becomes a node selector (see the operator's
	// placement table), so it must be a valid label value.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
	// +optional
	GPUType string `json:"gpuType,omitempty"`
	// GPUCount becomes an nvidia.com/gpu limit.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	// +optional
	GPUCount int32 `json:"gpuCount,omitempty"`
	// TEERequired places the performer on trusted-execution nodes.
	// +optional
	TEERequired bool `json:"teeRequired,omitempty"`
	// TEEType: sgx, sev or tdx.
	// +optional
	TEEType TEEType `json:"teeType,omitempty"`
	// CustomLabels the node must carry.
	// +optional
	CustomLabels map[string]string `json:"customLabels,omitempty"`
}

// PerformerSpec runs one AVS performer.
type PerformerSpec struct {
	// AVSAddress is the AVS contract the performer serves.
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{40}$`
	// +required
	AVSAddress string `json:"avsAddress"`
	// Image of the performer, without tag; version is the tag.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Image string `json:"image"`
	// Version is the image tag; changing it rolls to a new Pod without a gap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`
	// +required
	Version string `json:"version"`
	// Config of the performer container.
	// +optional
	Config PerformerConfig `json:"config,omitempty"`
	// Resources of the performer container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// Scheduling of the performer Pod.
	// +optional
	Scheduling *Scheduling `json:"scheduling,omitempty"`
	// HardwareRequirements of the performer.
	// +optional
	HardwareRequirements *HardwareRequirements `json:"hardwareRequirements,omitempty"`
	// ServiceAccountName the Pod runs as.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// ImagePullSecrets for the image.
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

// PerformerStatus reports the performer Pod and its Service.
type PerformerStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Phase is a one-word summary for kubectl get.
	// +optional
	Phase PerformerPhase `json:"phase,omitempty"`
	// PodName of the Pod serving now.
	// +optional
	PodName string `json:"podName,omitempty"`
	// ServiceName of the performer's Service.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`
	// DNSName of the Service, performer-<name>.<namespace>.svc.cluster.local.
	// +optional
	DNSName string `json:"dnsName,omitempty"`
	// GRPCEndpoint is dnsName:grpcPort.
	// +optional
	GRPCEndpoint string `json:"grpcEndpoint,omitempty"`
	// CurrentVersion is the version of the Pod serving now.
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`
	// NodeName the serving Pod runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// Performer runs one EigenLayer AVS performer as a Pod with a stable Service,
// placed on the hardware it needs.
// The name becomes the Service performer-<name>, a DNS label of at most 63
// characters, hence the limit of 53.
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 53 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 53 characters (lowercase letters, digits, '-'): it names the Service performer-<name>"
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=perf;perfs,categories=hyperfleet;hourglass
// +kubebuilder:printcolumn:name="AVS",type=string,JSONPath=`.spec.avsAddress`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.grpcEndpoint`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Performer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Undecoded lists the fields this object's last decode left zero
	// (see decode.go); never serialized.
	meta.Undecoded `json:"-"`

	// +required
	Spec PerformerSpec `json:"spec"`
	// +optional
	Status PerformerStatus `json:"status,omitempty"`
}

// PerformerList is a list of Performers.
// +kubebuilder:object:root=true
type PerformerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Performer `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &Performer{}, &PerformerList{})
}
