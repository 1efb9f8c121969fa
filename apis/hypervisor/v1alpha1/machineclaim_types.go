package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// Every metav1.Duration field of this group carries the same Pattern: what
// Go's time.ParseDuration reads, without a sign (no d or w units, no "-1h"),
// so a value the operator's decoder would fail on is refused when written
// instead of breaking the informer's list for every object of the kind. A
// CEL rule beside it gives the bounds the feature needs; it checks the
// Pattern first (self.matches(...) && ...), so a value stored before the
// Pattern existed makes it false, not a runtime error: the API server runs
// these rules on status writes too, and ratchets a false rule on an
// unchanged value but not an error, so an error would refuse every status
// write to the object, even the condition that says what is wrong with it
// (Quantity rules check isQuantity first for the same reason). The Type=string
// marker is there because controller-gen applies field markers before it
// knows metav1.Duration is a string, and refuses a Pattern on an untyped
// field.

// MachineClaimFinalizer keeps a claim until its machine is deleted. The API
// server adds it as it stores a new claim (kustomize/admission), a RunnerPool
// sets it on the claims it makes, and the operator adds it to any claim
// without it before it makes anything: each saves the write of adding it.
const MachineClaimFinalizer = "hypervisor.hyperfleet.io/machine"

// NotesAnnotationPrefix starts the annotations in which whoever owns a
// claim keeps its own notes about it (a RunnerPool, about the claim's
// runner). The claim's reconciler reads none of them, so their changes do
// not wake it.
const NotesAnnotationPrefix = "notes.hyperfleet.io/"

// MachinePhase is the short lifecycle state shown by kubectl get.
// +kubebuilder:validation:Enum=Pending;Provisioning;Warm;Running;Ready;Stopping;Terminated;Failed
type MachinePhase string

const (
	// MachinePending: accepted, waiting for its template, cluster or a clone slot.
	MachinePending MachinePhase = "Pending"
	// MachineProvisioning: the clone or create is under way, or the machine
	// is booting and its guest has not yet reported an address.
	MachineProvisioning MachinePhase = "Provisioning"
	// MachineWarm: a warm standby claim's machine, cloned and powered
	// off, waiting for a claim to take it (HypervisorMachineTemplate
	// spec.standby.warm).
	MachineWarm MachinePhase = "Warm"
	// MachineRunning: powered on, and its guest has reported no address for
	// 30 seconds (a normal boot goes from Provisioning to Ready): check the
	// guest agent and the machine's network.
	MachineRunning MachinePhase = "Running"
	// MachineReady: running with an address; usable.
	MachineReady MachinePhase = "Ready"
	// MachineStopping: being powered off and deleted.
	MachineStopping MachinePhase = "Stopping"
	// MachineTerminated: the machine is gone (shut itself down, expired or
	// was retired); the claim is kept as a record until deleted.
	MachineTerminated MachinePhase = "Terminated"
	// MachineFailed: provisioning failed for good; see the Stalled condition.
	MachineFailed MachinePhase = "Failed"
)

// MachineClaimSpec asks for one machine from a template.
// (spec.machineName cannot be set or removed either: the rule on the field
// itself only runs when both the old and the new object have it.)
// +kubebuilder:validation:XValidation:rule="has(self.machineName) == has(oldSelf.machineName)",message="spec.machineName is immutable (it cannot be set, changed or removed): the machine already made under the old name would be orphaned; create a new MachineClaim instead"
type MachineClaimSpec struct {
	// TemplateRef names what the machine is made from: a
	// HypervisorMachineTemplate in this namespace, or a Cyberdesk (kind
	// Cyberdesk) that controls this claim. It cannot be changed: the machine
	// already made from it would be orphaned.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.templateRef is immutable: the machine already cloned from the old template would be orphaned; create a new MachineClaim instead"
	// +required
	TemplateRef TemplateReference `json:"templateRef"`

	// Timeout is how long the machine may run once Ready before it is shut
	// down and the claim Terminated. Unset: no timeout. Between 1s and
	// 8760h (365 days), in Go duration units (s, m, h): 3d is refused,
	// write 72h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('1s') && duration(self) <= duration('8760h'))",message="spec.timeout must be a duration between 1s and 8760h (365 days), e.g. 72h for three days"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// MaxLifetime caps the claim's whole life from creation, provisioning
	// included. Unset: no cap. Between 1m and 8760h (365 days): a
	// shorter cap ends the claim before any machine can be Ready.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('1m') && duration(self) <= duration('8760h'))",message="spec.maxLifetime must be a duration between 1m and 8760h (365 days), e.g. 72h for three days"
	// +optional
	MaxLifetime *metav1.Duration `json:"maxLifetime,omitempty"`

	// ProvisioningTimeout is how long the machine may take to become Ready
	// before the claim is Failed and the machine removed. Between 1m and
	// 24h: a clone and first boot take at least tens of seconds, so a
	// shorter bound fails every claim.
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('1m') && duration(self) <= duration('24h'))",message="spec.provisioningTimeout must be a duration between 1m and 24h, e.g. 15m"
	// +optional
	ProvisioningTimeout *metav1.Duration `json:"provisioningTimeout,omitempty"`

	// UserData is cloud-init user data for this machine; it replaces the
	// template's. Put nothing secret here: use userDataSecretRef.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	UserData string `json:"userData,omitempty"`

	// UserDataSecretRef names a Secret key holding cloud-init user data
	// with credentials in it (a runner registration token, a join token).
	// It wins over userData.
	// +optional
	UserDataSecretRef *meta.SecretKeyReference `json:"userDataSecretRef,omitempty"`

	// CredentialsSecretRef names a Secret key (the Secret needs the
	// credentials label) holding the workload's credentials as a JSON object
	// of strings. With attestation (the template's spec.attestation) they
	// never go into user data: the operator hands them out once, over mTLS,
	// to the machine that proves with its SVID that it is this claim's.
	// Unset: the template's spec.workload.credentialsSecretRef, if any.
	// +optional
	CredentialsSecretRef *meta.SecretKeyReference `json:"credentialsSecretRef,omitempty"`

	// MachineName is the name the machine gets on its hypervisor (a KubeVirt
	// VirtualMachine's name, a Proxmox VM's name), instead of the one the
	// provider proposes ("hf-<namespace>-<name>"). A name already held by a
	// machine this claim does not own is never taken over: the claim waits,
	// saying so. Set it only where the name is the claim's alone (a KubeVirt
	// machine in the claim's own namespace): the provider's proposal carries
	// the namespace, a name of the claim's choosing does not. Cannot be
	// changed: the machine already made under the old name would be orphaned.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.machineName is immutable: the machine already made under the old name would be orphaned; create a new MachineClaim instead"
	// +optional
	MachineName string `json:"machineName,omitempty"`

	// Hostname of the guest. Empty: the machine's name.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Hostname string `json:"hostname,omitempty"`
}

// StandbyOrigin names the standby claim a machine came from.
type StandbyOrigin struct {
	// Name of the standby MachineClaim, in this namespace.
	Name string `json:"name"`
	// UID of the standby MachineClaim: the machine's owner until it is
	// handed over.
	UID types.UID `json:"uid"`
}

// MachineAddressType is the kind of a machine address.
// +kubebuilder:validation:Enum=IPv4;IPv6;Hostname
type MachineAddressType string

// MachineAddress is one address of a machine.
type MachineAddress struct {
	// Type of address.
	Type MachineAddressType `json:"type"`
	// Address value.
	Address string `json:"address"`
}

// MachineClaimStatus is the machine as last observed.
type MachineClaimStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled, and MachineProvisioned.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Phase is a one-word summary for kubectl get.
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`
	// Provider that runs the machine.
	// +optional
	Provider ProviderType `json:"provider,omitempty"`
	// ClusterName is the HypervisorCluster the machine was made on, kept so
	// finalization reaches the right hypervisor even if the template changes.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// MachineName is the machine's name on the hypervisor. It is chosen and
	// recorded before the create call, so a retry finds the same machine.
	// +optional
	MachineName string `json:"machineName,omitempty"`
	// VMID on Proxmox VE; recorded before the clone call.
	// +optional
	VMID *int32 `json:"vmid,omitempty"`
	// ProviderID identifies the machine, e.g. proxmox://pve1/1042 or
	// kubevirt://default/cyberdesk-alice.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// Node the machine runs on.
	// +optional
	Node string `json:"node,omitempty"`
	// AssignedAddress is the static IPv4 address (CIDR) taken from the
	// template's spec.network.ipv4.addresses, recorded before the machine
	// is created; empty with DHCP.
	// +optional
	AssignedAddress string `json:"assignedAddress,omitempty"`
	// Addresses reported by the guest.
	// +listType=atomic
	// +optional
	Addresses []MachineAddress `json:"addresses,omitempty"`
	// StartTime is when the machine was first seen running. It is written
	// with the phase that follows (Ready, or Running for a silent guest),
	// so it may appear a boot after the moment it records.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// ReadyTime is when the machine first became Ready.
	// +optional
	ReadyTime *metav1.Time `json:"readyTime,omitempty"`
	// ExpiryTime is when the claim's timeout or maxLifetime runs out,
	// whichever comes first.
	// +optional
	ExpiryTime *metav1.Time `json:"expiryTime,omitempty"`
	// TerminationReason says why the machine ended: Expired, ShutDown (the
	// guest powered off), MachineFailed (the hypervisor reports it failed),
	// Deleted, ProvisioningTimeout or AttestationFailed (the machine did
	// not attest before its join token expired).
	// +optional
	TerminationReason string `json:"terminationReason,omitempty"`
	// Attestation is how far the machine has come in proving its SPIFFE
	// identity, when its template asks for attestation.
	// +optional
	Attestation *MachineAttestationStatus `json:"attestation,omitempty"`
	// BoundFrom names the standby claim whose machine this claim took
	// (the template's spec.standby), until the machine is handed over.
	// +optional
	BoundFrom *StandbyOrigin `json:"boundFrom,omitempty"`
}

// AttestationPhase is one step of a machine's attestation.
// +kubebuilder:validation:Enum=Pending;Attested;CredentialsReleased;Failed
type AttestationPhase string

const (
	// AttestationPending: a join token was issued; the machine has not
	// yet shown the SVID it leads to.
	AttestationPending AttestationPhase = "Pending"
	// AttestationAttested: the machine presented its SVID to the
	// credential endpoint; its workload has no credentials.
	AttestationAttested AttestationPhase = "Attested"
	// AttestationCredentialsReleased: the machine attested and received
	// its workload's credentials, once.
	AttestationCredentialsReleased AttestationPhase = "CredentialsReleased"
	// AttestationFailed: the machine did not attest before its token's
	// expiry (tpm: within the template's tokenTTL), or SPIRE refused the
	// operator; see the Ready condition.
	AttestationFailed AttestationPhase = "Failed"
)

// MachineAttestationStatus records a machine's attestation, never a secret:
// the join token and the credentials stay in Secrets.
type MachineAttestationStatus struct {
	// Phase: Pending, Attested, CredentialsReleased or Failed.
	// +optional
	Phase AttestationPhase `json:"phase,omitempty"`
	// Method the template asked for: join-token or tpm.
	// +optional
	Method AttestationMethod `json:"method,omitempty"`
	// SPIFFEID minted for the machine's bootstrap workload: the one ID the
	// credential endpoint hands this claim's credentials to.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	SPIFFEID string `json:"spiffeID,omitempty"`
	// TokenExpiryTime is when the join token expires (tpm: the end of the
	// window spec.attestation.spire.tokenTTL gives the machine to attest with
	// its TPM); it is also the last moment the credentials are handed out.
	// +optional
	TokenExpiryTime *metav1.Time `json:"tokenExpiryTime,omitempty"`
	// AttestedTime is when the machine first presented its SVID.
	// +optional
	AttestedTime *metav1.Time `json:"attestedTime,omitempty"`
	// CredentialsReleasedTime is when its credentials were handed out.
	// +optional
	CredentialsReleasedTime *metav1.Time `json:"credentialsReleasedTime,omitempty"`
}

// MachineClaim asks for one virtual machine cloned from a
// HypervisorMachineTemplate; deleting the claim deletes the machine.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mc;mcs,categories=hyperfleet
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Template",type=string,JSONPath=`.spec.templateRef.name`
// +kubebuilder:printcolumn:name="Machine",type=string,JSONPath=`.status.machineName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.addresses[0].address`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiryTime`
// +kubebuilder:printcolumn:name="Attestation",type=string,JSONPath=`.status.attestation.phase`,priority=1
// +kubebuilder:printcolumn:name="Provider-ID",type=string,JSONPath=`.status.providerID`,priority=1
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MachineClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Undecoded lists the fields this object's last decode left zero
	// (see decode.go); never serialized.
	meta.Undecoded `json:"-"`

	// +required
	Spec MachineClaimSpec `json:"spec"`
	// +optional
	Status MachineClaimStatus `json:"status,omitempty"`
}

// MachineClaimList is a list of MachineClaims.
// +kubebuilder:object:root=true
type MachineClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineClaim `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &MachineClaim{}, &MachineClaimList{})
}

// TemplateReference names what a claim's machine is made from, in the
// claim's namespace: a HypervisorMachineTemplate (kind and apiGroup unset),
// or an object of a kind that stands in for one. A Cyberdesk stands in for
// one for the claim it controls: its machine is made from the Cyberdesk
// VirtualMachine template, on the operator's own KubeVirt.
// +kubebuilder:validation:XValidation:rule="(has(self.kind) ? self.kind : 'HypervisorMachineTemplate') == 'HypervisorMachineTemplate' ? (!has(self.apiGroup) || self.apiGroup == 'hypervisor.hyperfleet.io') : (has(self.apiGroup) && self.apiGroup == 'cyberdesk.io')",message="spec.templateRef: kind HypervisorMachineTemplate (the default) is in apiGroup hypervisor.hyperfleet.io (the default); kind Cyberdesk needs apiGroup cyberdesk.io"
type TemplateReference struct {
	// APIGroup of the referenced kind: hypervisor.hyperfleet.io (unset) or
	// cyberdesk.io.
	// +kubebuilder:validation:Enum=hypervisor.hyperfleet.io;cyberdesk.io
	// +optional
	APIGroup string `json:"apiGroup,omitempty"`
	// Kind of the referenced object: HypervisorMachineTemplate (unset) or
	// Cyberdesk, which only the Cyberdesk controlling the claim may be.
	// +kubebuilder:validation:Enum=HypervisorMachineTemplate;Cyberdesk
	// +optional
	Kind string `json:"kind,omitempty"`
	// Name of the referenced object, in the claim's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// KindHypervisorMachineTemplate is TemplateReference.Kind's default.
const KindHypervisorMachineTemplate = "HypervisorMachineTemplate"

// IsMachineTemplate reports whether the reference names a
// HypervisorMachineTemplate (the default), not a kind standing in for one.
func (r TemplateReference) IsMachineTemplate() bool {
	return r.Kind == "" || r.Kind == KindHypervisorMachineTemplate
}

// GroupKind is the referenced kind, defaults filled in.
func (r TemplateReference) GroupKind() (group, kind string) {
	if r.IsMachineTemplate() {
		return GroupVersion.Group, KindHypervisorMachineTemplate
	}
	return r.APIGroup, r.Kind
}
