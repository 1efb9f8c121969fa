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

// PerformerConfig is the performer container's runtime configuration. It
// takes the variables in either shape: env (core EnvVars) or the original
// Hourglass operator's environment map and environmentFrom list, as the
// executor writes them. A variable set in two of them is refused, so no
// shape silently overrides another.
// +kubebuilder:validation:XValidation:rule="!has(self.env) || !has(self.environment) || self.env.all(e, !(e.name in self.environment))",message="spec.config.env and spec.config.environment set the same variable: set each variable in one of them"
// +kubebuilder:validation:XValidation:rule="!has(self.environmentFrom) || !has(self.environment) || self.environmentFrom.all(e, !(e.name in self.environment))",message="spec.config.environmentFrom and spec.config.environment set the same variable: set each variable in one of them"
// +kubebuilder:validation:XValidation:rule="!has(self.environmentFrom) || !has(self.env) || self.environmentFrom.all(f, !self.env.exists(e, e.name == f.name))",message="spec.config.environmentFrom and spec.config.env set the same variable: set each variable in one of them"
type PerformerConfig struct {
	// GRPCPort the performer serves on; probes and the Service use it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=8080
	// +optional
	GRPCPort int32 `json:"grpcPort,omitempty"`
	// Env of the container, after the variables of environment and
	// environmentFrom (so env may refer to them as $(NAME)).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Environment is the original Hourglass operator's form of plain
	// variables, name to value, as the executor writes them. The container
	// gets them sorted by name.
	// +kubebuilder:validation:MaxProperties=256
	// +optional
	Environment map[string]string `json:"environment,omitempty"`
	// EnvironmentFrom is the original Hourglass operator's form of variables
	// read from a key of a Secret or ConfigMap, as the executor writes them.
	// Unlike envFrom, each entry names one variable and one key.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	// +optional
	EnvironmentFrom []EnvironmentFromSource `json:"environmentFrom,omitempty"`
	// ServiceAccountName is the original Hourglass operator's place for the
	// Pod's service account; the same as spec.serviceAccountName, and the
	// API server refuses the two naming different accounts.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
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

// EnvironmentFromSource is one variable of spec.config.environmentFrom.
type EnvironmentFromSource struct {
	// Name of the environment variable.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	Name string `json:"name"`
	// ValueFrom names the Secret or ConfigMap key holding the value.
	// +required
	ValueFrom EnvironmentValueFrom `json:"valueFrom"`
}

// EnvironmentValueFrom is the key a variable's value is read from: exactly
// one of secretKeyRef and configMapKeyRef.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="spec.config.environmentFrom[].valueFrom needs exactly one of secretKeyRef and configMapKeyRef"
type EnvironmentValueFrom struct {
	// SecretKeyRef selects a key of a Secret in the Performer's namespace.
	// +optional
	SecretKeyRef *KeySelector `json:"secretKeyRef,omitempty"`
	// ConfigMapKeyRef selects a key of a ConfigMap in the Performer's namespace.
	// +optional
	ConfigMapKeyRef *KeySelector `json:"configMapKeyRef,omitempty"`
}

// KeySelector names a key of a Secret or ConfigMap.
type KeySelector struct {
	// Name of the Secret or ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key within it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Key string `json:"key"`
}

// PodSecurityProfile is the Pod Security Standard the performer Pod meets.
// +kubebuilder:validation:Enum=Restricted;Baseline
type PodSecurityProfile string

const (
	// PodSecurityRestricted: non-root, every capability dropped, seccomp
	// RuntimeDefault, no privilege escalation.
	PodSecurityRestricted PodSecurityProfile = "Restricted"
	// PodSecurityBaseline: seccomp RuntimeDefault and no privilege
	// escalation, for images that must run as root or need capabilities.
	PodSecurityBaseline PodSecurityProfile = "Baseline"
)

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

// PerformerSpec runs one AVS performer. It accepts the original Hourglass
// operator's fields beside HyperFleet's (docs/hourglass.md maps each).
// +kubebuilder:validation:XValidation:rule="has(self.version) || self.image.contains('@') || self.image.matches(':[^/]+$')",message="spec.version is required when spec.image has no tag or digest: it becomes the image's tag"
// +kubebuilder:validation:XValidation:rule="!has(self.serviceAccountName) || !has(self.config) || !has(self.config.serviceAccountName) || self.serviceAccountName == self.config.serviceAccountName",message="spec.serviceAccountName and spec.config.serviceAccountName name different service accounts: set one of them"
type PerformerSpec struct {
	// AVSAddress is the AVS contract the performer serves.
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{40}$`
	// +required
	AVSAddress string `json:"avsAddress"`
	// Image of the performer. With a tag or digest (repo:tag, repo@sha256:…,
	// as the executor writes it) it is used as given; without, version is
	// its tag.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Image string `json:"image"`
	// ImagePullPolicy of the performer container; unset, Kubernetes'
	// default (Always for :latest, else IfNotPresent).
	// +kubebuilder:validation:Enum=Always;Never;IfNotPresent
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Version of the performer: the image's tag when spec.image has none,
	// else a record of the version for upgrades (status.currentVersion).
	// Changing it, or the image, rolls to a new Pod without a gap.
	// Required when spec.image has no tag or digest.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`
	// +optional
	Version string `json:"version,omitempty"`
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
	// PodSecurityProfile the performer Pod meets: Restricted (the default:
	// runs as non-root, drops every capability) or Baseline, for an image
	// that must run as root or needs a capability. Both keep seccomp
	// RuntimeDefault and forbid privilege escalation.
	// +optional
	PodSecurityProfile PodSecurityProfile `json:"podSecurityProfile,omitempty"`
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
	// Ready is true while a Ready Pod serves behind the Service: the
	// original Hourglass operator's field, which the executor waits for.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// ReadyTime is when ready last turned true.
	// +optional
	ReadyTime *metav1.Time `json:"readyTime,omitempty"`
	// LastUpgrade is when the Service last moved to a new revision's Pod.
	// +optional
	LastUpgrade *metav1.Time `json:"lastUpgrade,omitempty"`
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
