package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// ProviderType names a hypervisor backend.
// +kubebuilder:validation:Enum=proxmox;kubevirt
type ProviderType string

const (
	ProviderProxmox  ProviderType = "proxmox"
	ProviderKubeVirt ProviderType = "kubevirt"
)

// HypervisorClusterSpec says how to reach one hypervisor and what defaults the
// machines cloned on it get.
// +kubebuilder:validation:XValidation:rule="self.provider != 'proxmox' || (has(self.proxmox) && !has(self.kubevirt))",message="spec.proxmox must be set, and spec.kubevirt must not, when spec.provider is proxmox"
// +kubebuilder:validation:XValidation:rule="self.provider != 'kubevirt' || !has(self.proxmox)",message="spec.proxmox must not be set when spec.provider is kubevirt"
// +kubebuilder:validation:XValidation:rule="self.provider != 'proxmox' || (has(self.endpoint) && self.endpoint.startsWith('https://'))",message="spec.endpoint is required for provider proxmox and must be an https:// URL, e.g. https://pve.example.com:8006/api2/json"
// +kubebuilder:validation:XValidation:rule="self.provider != 'proxmox' || has(self.credentialsRef)",message="spec.credentialsRef is required for provider proxmox: name a Secret holding tokenID and tokenSecret, or username and password"
// Immutability is checked here, on the parent, so that adding or removing a
// field is refused as well as changing it: a rule on the field itself only
// runs when both the old and the new object have it.
// +kubebuilder:validation:XValidation:rule="has(self.endpoint) == has(oldSelf.endpoint) && (!has(self.endpoint) || self.endpoint == oldSelf.endpoint)",message="spec.endpoint is immutable (it cannot be set, changed or removed): the machines already made are on the old endpoint and would be orphaned; create a new HypervisorCluster instead"
// On kubevirt the credentials Secret's kubeconfig chooses the cluster the
// machines are on; on proxmox the endpoint does, and the Secret may be
// switched for another (the old one is held until it is let go).
// +kubebuilder:validation:XValidation:rule="self.provider != 'kubevirt' || (has(self.credentialsRef) == has(oldSelf.credentialsRef) && (!has(self.credentialsRef) || self.credentialsRef.name == oldSelf.credentialsRef.name))",message="spec.credentialsRef is immutable on kubevirt (it cannot be set, changed or removed): its kubeconfig chooses the cluster the machines are on, which would be orphaned; rotate the kubeconfig inside the Secret instead"
// +kubebuilder:validation:XValidation:rule="has(self.kubevirt) == has(oldSelf.kubevirt) || (has(self.kubevirt) ? !has(self.kubevirt.namespace) : !has(oldSelf.kubevirt.namespace))",message="spec.kubevirt.namespace is immutable (it cannot be set, changed or removed): the machines already made are in the old namespace and would be orphaned; create a new HypervisorCluster instead"
type HypervisorClusterSpec struct {
	// Provider selects the hypervisor backend. It cannot be changed: the
	// machines already running belong to the backend that made them.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.provider is immutable: changing it would orphan the machines this cluster runs; create a new HypervisorCluster instead"
	// +required
	Provider ProviderType `json:"provider"`

	// Endpoint is the hypervisor's API URL. For proxmox, the REST API base,
	// e.g. https://pve.example.com:8006/api2/json. For kubevirt, leave it empty
	// to use the operator's own cluster, or set credentialsRef to a Secret with
	// a kubeconfig for a remote one.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// CredentialsRef names a Secret in this namespace, usually synced by an
	// ExternalSecret and labelled hyperfleet.io/credentials=true so the
	// operator's Secret cache sees it. Keys for proxmox: tokenID and
	// tokenSecret (API token, preferred), or username and password. Keys for
	// kubevirt: kubeconfig (only for a remote cluster).
	// +optional
	CredentialsRef *meta.LocalObjectReference `json:"credentialsRef,omitempty"`

	// TLS says how the hypervisor's certificate is trusted.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`

	// Proxmox holds settings only a Proxmox VE cluster has. Required when
	// provider is proxmox.
	// +optional
	Proxmox *ProxmoxClusterSpec `json:"proxmox,omitempty"`

	// KubeVirt holds settings only a KubeVirt cluster has.
	// +optional
	KubeVirt *KubeVirtClusterSpec `json:"kubevirt,omitempty"`

	// HealthCheckInterval is how often the hypervisor is checked for
	// reachability, version and capacity when nothing else changes.
	// Between 1s and 24h: below a second the check would run on every
	// reconcile; above a day a hypervisor's outage goes unnoticed for too
	// long. Go duration units only (s, m, h): 7d is refused, write 168h.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('1s') && duration(self) <= duration('24h'))",message="spec.healthCheckInterval must be a duration between 1s and 24h, e.g. 5m"
	// +optional
	HealthCheckInterval *metav1.Duration `json:"healthCheckInterval,omitempty"`
}

// TLSConfig says how to trust the hypervisor's serving certificate.
// +kubebuilder:validation:XValidation:rule="!(has(self.insecureSkipVerify) && self.insecureSkipVerify && has(self.caBundleRef))",message="spec.tls.caBundleRef and spec.tls.insecureSkipVerify are mutually exclusive"
type TLSConfig struct {
	// CABundleRef names a Secret or ConfigMap key holding PEM CA certificates
	// that sign the hypervisor's certificate. Without it the system roots are used.
	// +optional
	CABundleRef *meta.KeyReference `json:"caBundleRef,omitempty"`

	// ServerName overrides the name the certificate is checked against.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServerName string `json:"serverName,omitempty"`

	// InsecureSkipVerify turns certificate verification off. Only for
	// throwaway labs: anyone on the path can read the API token.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// ProxmoxClusterSpec holds Proxmox VE cluster-wide defaults and limits.
type ProxmoxClusterSpec struct {
	// Nodes limits placement to these Proxmox nodes. Empty: every online node.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$`
	// +listType=set
	// +optional
	Nodes []string `json:"nodes,omitempty"`

	// DefaultStorage is the storage pool clones go to when a template names none.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	DefaultStorage string `json:"defaultStorage,omitempty"`

	// DefaultBridge is the network bridge (e.g. vmbr0) used when a template names none.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	DefaultBridge string `json:"defaultBridge,omitempty"`

	// DNS is given to machines through cloud-init when a template sets none.
	// +optional
	DNS *DNSConfig `json:"dns,omitempty"`

	// Tags are added to every VM HyperFleet creates here, besides the
	// ownership tags it always sets. The tag hyperfleet and every tag
	// starting with hf- are the operator's own marks and are refused.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9][a-z0-9_.+-]*$`
	// +kubebuilder:validation:items:XValidation:rule="self != 'hyperfleet' && !self.startsWith('hf-')",message="the tag hyperfleet and tags starting with hf- are reserved for the operator's ownership marks"
	// +listType=set
	// +optional
	Tags []string `json:"tags,omitempty"`

	// MaxConcurrentClonesPerNode caps clones running at once on one node, so
	// a burst of claims queues instead of hitting storage-lock timeouts.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +kubebuilder:default=2
	// +optional
	MaxConcurrentClonesPerNode int32 `json:"maxConcurrentClonesPerNode,omitempty"`

	// MaxConcurrentClonesPerStorage caps clones running at once into one storage pool.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +kubebuilder:default=4
	// +optional
	MaxConcurrentClonesPerStorage int32 `json:"maxConcurrentClonesPerStorage,omitempty"`

	// CloudInitStorage is a storage with the "iso" content type on every
	// node, where each machine's cloud-init user data is uploaded as a small
	// NoCloud ISO (Proxmox has no API to write cicustom snippets). Defaults
	// to "local".
	// +kubebuilder:validation:MaxLength=64
	// +optional
	CloudInitStorage string `json:"cloudInitStorage,omitempty"`

	// TaskTimeout bounds how long one Proxmox task (clone, start, delete) is
	// polled before it is reported as stuck. Between 10s and 24h: even a
	// linked clone's task takes seconds, so a shorter bound would report
	// healthy tasks as stuck; a full clone of a large disk can take hours.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('10s') && duration(self) <= duration('24h'))",message="spec.proxmox.taskTimeout must be a duration between 10s and 24h, e.g. 10m"
	// +optional
	TaskTimeout *metav1.Duration `json:"taskTimeout,omitempty"`
}

// DNSConfig is DNS for machines' cloud-init.
type DNSConfig struct {
	// Nameservers, IPv4 or IPv6 addresses.
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="each nameserver must be an IP address"
	// +listType=atomic
	// +optional
	Nameservers []string `json:"nameservers,omitempty"`
	// SearchDomain, e.g. lab.example.com.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	SearchDomain string `json:"searchDomain,omitempty"`
}

// KubeVirtClusterSpec holds KubeVirt cluster-wide settings.
// (The change itself is refused on the field: the same comparison written
// here is estimated by the API server at over a hundred times its budget.)
// +kubebuilder:validation:XValidation:rule="has(self.namespace) == has(oldSelf.namespace)",message="spec.kubevirt.namespace is immutable (it cannot be set, changed or removed): the machines already made are in the old namespace and would be orphaned; create a new HypervisorCluster instead"
type KubeVirtClusterSpec struct {
	// Namespace where VirtualMachines are created. Empty: the claim's
	// namespace. On the operator's own cluster (no credentialsRef) only this
	// HypervisorCluster's own namespace is accepted; on a remote cluster the
	// kubeconfig's own rights decide.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.kubevirt.namespace is immutable (it cannot be set, changed or removed): the machines already made are in the old namespace and would be orphaned; create a new HypervisorCluster instead"
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Labels added to every VirtualMachine, besides the ownership labels.
	// Keys under hyperfleet.io/ are the operator's own and are refused.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('hyperfleet.io/'))",message="spec.kubevirt.labels keys under hyperfleet.io/ are reserved for the operator's ownership labels"
	// +optional
	Labels map[string]LabelValue `json:"labels,omitempty"`
}

// LabelValue is a Kubernetes label value: checked here, where the tenant
// writes it, not when the VirtualMachine it lands on is refused later.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`
type LabelValue string

// ClusterNode is one hypervisor node as last observed.
type ClusterNode struct {
	// Name of the node.
	Name string `json:"name"`
	// Online is whether the node answered.
	Online bool `json:"online"`
	// CPUs on the node.
	// +optional
	CPUs int32 `json:"cpus,omitempty"`
	// MemoryTotalBytes on the node.
	// +optional
	MemoryTotalBytes int64 `json:"memoryTotalBytes,omitempty"`
	// MemoryFreeBytes on the node.
	// +optional
	MemoryFreeBytes int64 `json:"memoryFreeBytes,omitempty"`
}

// HypervisorClusterStatus is what the operator last observed of the hypervisor.
type HypervisorClusterStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Version of the hypervisor software, e.g. "8.2.4" or "v1.9.0".
	// +optional
	Version string `json:"version,omitempty"`
	// Nodes as last observed.
	// +listType=map
	// +listMapKey=name
	// +optional
	Nodes []ClusterNode `json:"nodes,omitempty"`
	// LastCheckTime is when the hypervisor last answered a health check.
	// +optional
	LastCheckTime *metav1.Time `json:"lastCheckTime,omitempty"`
	// Machines is how many machines this operator currently owns here.
	// +optional
	Machines int32 `json:"machines,omitempty"`
}

// HypervisorCluster is a hypervisor HyperFleet provisions machines on: a
// Proxmox VE cluster or a KubeVirt-enabled Kubernetes cluster.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hvc;hvcs,categories=hyperfleet
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Machines",type=integer,JSONPath=`.status.machines`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HypervisorCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Undecoded lists the fields this object's last decode left zero
	// (see decode.go); never serialized.
	meta.Undecoded `json:"-"`

	// +required
	Spec HypervisorClusterSpec `json:"spec"`
	// +optional
	Status HypervisorClusterStatus `json:"status,omitempty"`
}

// HypervisorClusterList is a list of HypervisorClusters.
// +kubebuilder:object:root=true
type HypervisorClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HypervisorCluster `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &HypervisorCluster{}, &HypervisorClusterList{})
}
