package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// ChainConfig is one chain the executor watches for tasks.
type ChainConfig struct {
	// Name of the chain, e.g. ethereum or base.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`
	// ChainID, e.g. 1 for Ethereum mainnet. At most 4503599627370476, the
	// largest chain ID EIP-2294 allows.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4503599627370476
	// +required
	ChainID int64 `json:"chainId"`
	// RPCURL of the chain's JSON-RPC endpoint.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|wss?)://[^\s]+$`
	// +required
	RPCURL string `json:"rpcURL"`
	// TaskMailboxAddress is the TaskMailbox contract on this chain.
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{40}$`
	// +required
	TaskMailboxAddress string `json:"taskMailboxAddress"`
}

// OperatorKeys locates the operator's signing keys.
type OperatorKeys struct {
	// SecretRef names the Secret, in this namespace, holding the keys; it is
	// mounted read-only and never copied into the ConfigMap.
	// +required
	SecretRef meta.LocalObjectReference `json:"secretRef"`
	// MountPath where the Secret's keys appear in the executor container.
	// +kubebuilder:validation:Pattern=`^/[^\s]*$`
	// +kubebuilder:default="/etc/hourglass/keys"
	// +optional
	MountPath string `json:"mountPath,omitempty"`
}

// HourglassExecutorSpec runs an Hourglass executor.
type HourglassExecutorSpec struct {
	// Image of the executor, e.g. ghcr.io/layr-labs/hourglass/executor:v1.2.0.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +required
	Image string `json:"image"`
	// Replicas of the executor Deployment.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=1
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// AggregatorEndpoint the executor reports to, host:port or URL.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +required
	AggregatorEndpoint string `json:"aggregatorEndpoint"`
	// OperatorAddress is the operator's Ethereum address.
	// +kubebuilder:validation:Pattern=`^0x[0-9a-fA-F]{40}$`
	// +optional
	OperatorAddress string `json:"operatorAddress,omitempty"`
	// Chains the executor serves.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +required
	Chains []ChainConfig `json:"chains"`
	// OperatorKeys are the signing keys, from a Secret.
	// +required
	OperatorKeys OperatorKeys `json:"operatorKeys"`
	// PerformerSelector picks the Performers, in this namespace, the executor
	// may send tasks to. Unset: every Performer in the namespace.
	// +optional
	PerformerSelector *metav1.LabelSelector `json:"performerSelector,omitempty"`
	// Resources of the executor container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// Scheduling of the executor Pods.
	// +optional
	Scheduling *Scheduling `json:"scheduling,omitempty"`
	// ServiceAccountName the executor Pods run as.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Env adds environment variables to the executor container.
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// ImagePullSecrets for the executor image.
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// GRPCPort is the port the executor serves gRPC on (ponos's
	// --grpc-port, 9090 by default there too). The readiness and liveness
	// probes open a TCP connection to it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=9090
	// +optional
	GRPCPort int32 `json:"grpcPort,omitempty"`
}

// HourglassExecutorStatus mirrors the executor Deployment.
type HourglassExecutorStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Replicas of the Deployment.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas of the Deployment.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// AvailableReplicas of the Deployment.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// ConfigHash of the executor ConfigMap the Pods run with.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`
	// ConfigMapName holds the executor configuration.
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`
	// Selector is the label selector of the executor Pods, in the string
	// form the scale subresource gives a HorizontalPodAutoscaler.
	// +optional
	Selector string `json:"selector,omitempty"`
}

// HourglassExecutor runs the Hourglass executor of an EigenLayer AVS: a
// Deployment and its configuration, with the operator keys from a Secret.
// The name labels the executor Pods, so it must fit a label value.
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 63 characters (lowercase letters, digits, '-'): it names the executor Deployment and labels its Pods"
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=hge;hges,categories=hyperfleet;hourglass
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HourglassExecutor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Undecoded lists the fields this object's last decode left zero
	// (see decode.go); never serialized.
	meta.Undecoded `json:"-"`

	// +required
	Spec HourglassExecutorSpec `json:"spec"`
	// +optional
	Status HourglassExecutorStatus `json:"status,omitempty"`
}

// HourglassExecutorList is a list of HourglassExecutors.
// +kubebuilder:object:root=true
type HourglassExecutorList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HourglassExecutor `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &HourglassExecutor{}, &HourglassExecutorList{})
}
