package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// CyberdeskPhase is the desktop's one-word state.
// +kubebuilder:validation:Enum=Pending;Provisioning;Running;Stopping;Terminated;Failed
type CyberdeskPhase string

const (
	CyberdeskPending      CyberdeskPhase = "Pending"
	CyberdeskProvisioning CyberdeskPhase = "Provisioning"
	CyberdeskRunning      CyberdeskPhase = "Running"
	CyberdeskStopping     CyberdeskPhase = "Stopping"
	CyberdeskTerminated   CyberdeskPhase = "Terminated"
	CyberdeskFailed       CyberdeskPhase = "Failed"
)

// CyberdeskSpec asks for one desktop VM for a limited time.
type CyberdeskSpec struct {
	// TimeoutMs is how long the desktop may run, in milliseconds, counted
	// from when its VM starts. At expiry the VM is shut down. Between 1000
	// (one second) and 31536000000 (365 days); the upper bound keeps the
	// expiry far from time.Duration's overflow at about 9.2e12 ms.
	// +kubebuilder:validation:Minimum=1000
	// +kubebuilder:validation:Maximum=31536000000
	// +kubebuilder:default=3600000
	// +optional
	TimeoutMs int64 `json:"timeoutMs,omitempty"`

	// UserData is cloud-init user data for the desktop; it reaches the VM
	// template as ${user_data_base64}.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	UserData string `json:"userData,omitempty"`
}

// VirtualMachineReference points at the KubeVirt VirtualMachine of a desktop.
type VirtualMachineReference struct {
	// Name of the VirtualMachine, "cyberdesk-<name>".
	Name string `json:"name"`
	// Namespace of the VirtualMachine.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// UID of the VirtualMachine.
	// +optional
	UID string `json:"uid,omitempty"`
}

// CyberdeskStatus tracks the desktop's VM.
type CyberdeskStatus struct {
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
	Phase CyberdeskPhase `json:"phase,omitempty"`
	// VirtualMachineRef is the desktop's VirtualMachine.
	// +optional
	VirtualMachineRef *VirtualMachineReference `json:"virtualMachineRef,omitempty"`
	// StartTime is when the VM started running.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// ExpiryTime is startTime plus timeoutMs.
	// +optional
	ExpiryTime *metav1.Time `json:"expiryTime,omitempty"`
	// IPAddress of the desktop's VM.
	// +optional
	IPAddress string `json:"ipAddress,omitempty"`
	// NodeName the VM runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
}

// Cyberdesk is a time-limited desktop virtual machine on KubeVirt.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cd;cds,categories=hyperfleet
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 53",message="a Cyberdesk name may be at most 53 characters: its VirtualMachine is named cyberdesk-<name>, a DNS label of at most 63"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="VM",type=string,JSONPath=`.status.virtualMachineRef.name`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.ipAddress`
// +kubebuilder:printcolumn:name="Timeout-ms",type=integer,JSONPath=`.spec.timeoutMs`,priority=1
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiryTime`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cyberdesk struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Undecoded lists the fields this object's last decode left zero
	// (see decode.go); never serialized.
	meta.Undecoded `json:"-"`

	// +optional
	Spec CyberdeskSpec `json:"spec,omitempty"`
	// +optional
	Status CyberdeskStatus `json:"status,omitempty"`
}

// CyberdeskList is a list of Cyberdesks.
// +kubebuilder:object:root=true
type CyberdeskList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cyberdesk `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &Cyberdesk{}, &CyberdeskList{})
}

// GetConditions returns the status conditions.
func (o *Cyberdesk) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *Cyberdesk) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns the generation the status describes.
func (o *Cyberdesk) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration records the generation the status describes.
func (o *Cyberdesk) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }
