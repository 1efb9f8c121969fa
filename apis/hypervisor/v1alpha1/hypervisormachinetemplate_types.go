package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// HypervisorMachineTemplateSpec is the shape of the machines cloned from it.
// +kubebuilder:validation:XValidation:rule="[has(self.proxmox), has(self.kubevirt)].exists_one(x, x)",message="exactly one of spec.proxmox or spec.kubevirt must be set, matching the provider of the cluster in spec.clusterRef"
// +kubebuilder:validation:XValidation:rule="!has(self.workload) || self.workload.type != 'github-runner' || has(self.workload.githubRunner)",message="spec.workload.githubRunner is required when spec.workload.type is github-runner"
// +kubebuilder:validation:XValidation:rule="!has(self.attestation) || self.attestation.method == 'none' || has(self.attestation.spire)",message="spec.attestation.spire is required when spec.attestation.method is join-token or tpm"
// +kubebuilder:validation:XValidation:rule="!has(self.workload) || !has(self.workload.credentialsSecretRef) || (has(self.attestation) && self.attestation.method != 'none')",message="spec.workload.credentialsSecretRef needs spec.attestation (join-token or tpm): credentials are handed only to a machine that proved who it is"
// +kubebuilder:validation:XValidation:rule="!has(self.standby) || !has(self.standby.warm) || self.standby.warm == 0 || has(self.proxmox)",message="spec.standby.warm is for Proxmox templates (a VM cloned and powered off); on KubeVirt, where a VM starts in seconds, use spec.standby.hot"
type HypervisorMachineTemplateSpec struct {
	// ClusterRef names the HypervisorCluster, in this namespace, that runs
	// the machines. It cannot be changed: claims already made from this
	// template would lose track of their machines.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.clusterRef is immutable: existing machines would be orphaned on the old cluster; create a new template instead"
	// +required
	ClusterRef meta.LocalObjectReference `json:"clusterRef"`

	// Resources are the CPU, memory and disk of each machine. Unset values
	// keep what the source template has.
	// +optional
	Resources *MachineResources `json:"resources,omitempty"`

	// Network is the machine's primary network interface.
	// +optional
	Network *NetworkConfig `json:"network,omitempty"`

	// Placement chooses the node and storage. Unset: the node with the most
	// free memory among the cluster's nodes, and the cluster's default storage.
	// +optional
	Placement *Placement `json:"placement,omitempty"`

	// CloudInit configures the guest on first boot.
	// +optional
	CloudInit *CloudInitConfig `json:"cloudInit,omitempty"`

	// Workload is what the machine runs once booted.
	// +optional
	Workload *WorkloadConfig `json:"workload,omitempty"`

	// Attestation is how the machine proves its identity to SPIRE.
	// +optional
	Attestation *AttestationConfig `json:"attestation,omitempty"`

	// Proxmox holds the clone source and options for a Proxmox VE cluster.
	// +optional
	Proxmox *ProxmoxTemplateSpec `json:"proxmox,omitempty"`

	// KubeVirt holds the VirtualMachine template for a KubeVirt cluster.
	// +optional
	KubeVirt *KubeVirtTemplateSpec `json:"kubevirt,omitempty"`

	// Standby keeps machines of this template made and booted ahead of
	// demand: a MachineClaim that fits one (docs/standby.md) takes it in
	// seconds instead of waiting for a clone and a boot, and the template
	// makes another.
	// +optional
	Standby *StandbySpec `json:"standby,omitempty"`
}

// StandbySpec is the capacity a template keeps ready ahead of demand.
type StandbySpec struct {
	// Hot is how many machines are kept booted and Ready, holding no
	// workload credential, for claims to take. 0: none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Hot int32 `json:"hot,omitempty"`

	// Warm is how many machines are kept cloned and powered off, never
	// configured or booted, for claims to take: a claim that takes one
	// configures it with its own user data and hostname and boots it, so
	// it skips the clone but not the boot. Any claim without its own
	// machine name fits one. Proxmox templates only. 0: none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Warm int32 `json:"warm,omitempty"`

	// MaxAge retires a standby machine no claim took within it, and makes
	// a fresh one, so standby machines never go stale (a template image
	// updated on the hypervisor reaches them). Unset: 24h. Between 10m and
	// 720h (30 days).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('10m') && duration(self) <= duration('720h'))",message="spec.standby.maxAge must be a duration between 10m and 720h (30 days), e.g. 24h"
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// Schedules change hot for windows of the day or week: each begins
	// when its cron expression fires, in its time zone, and the one that
	// fired last is in force (a schedule with hot 0 ends a window). A
	// restart inside a window keeps it: the last firing is worked out
	// again from the expressions. None fired in the last 8 days, or none
	// given: hot above.
	// +kubebuilder:validation:MaxItems=20
	// +listType=map
	// +listMapKey=name
	// +optional
	Schedules []StandbySchedule `json:"schedules,omitempty"`

	// BurstHeadroom keeps more machines hot after claims arrive: as many
	// as the template's claims in use at the peak (at most max), halving
	// every halfLife once the peak has passed, so the next burst meets hot
	// machines and an idle night costs nothing.
	// +optional
	BurstHeadroom *BurstHeadroom `json:"burstHeadroom,omitempty"`
}

// StandbySchedule is a window in which a template keeps a number of
// machines hot.
type StandbySchedule struct {
	// Name of the window, shown in status.standby.schedule.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`
	// Start is a five-field cron expression (minute hour day-of-month
	// month day-of-week, e.g. "0 8 * * 1-5" for 08:00 on weekdays) at
	// which the window begins.
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=100
	// +required
	Start string `json:"start"`
	// TimeZone the expression is read in (IANA, e.g. Europe/Berlin).
	// Unset: UTC.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// Hot is how many machines are kept hot during the window.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +required
	Hot int32 `json:"hot"`
}

// BurstHeadroom is extra hot capacity after a burst, decaying to none.
type BurstHeadroom struct {
	// Max bounds the extra machines.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	Max int32 `json:"max"`
	// HalfLife halves the extra machines once the peak has passed.
	// Between 1m and 24h. Unset: 30m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('1m') && duration(self) <= duration('24h'))",message="spec.standby.burstHeadroom.halfLife must be a duration between 1m and 24h, e.g. 30m"
	// +optional
	HalfLife *metav1.Duration `json:"halfLife,omitempty"`
}

// MachineResources sizes a machine.
type MachineResources struct {
	// CPUCores per socket.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	// +optional
	CPUCores int32 `json:"cpuCores,omitempty"`
	// CPUSockets.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	CPUSockets int32 `json:"cpuSockets,omitempty"`
	// Memory, e.g. 4Gi. At least 128Mi, at most 16Ti (beyond what either
	// hypervisor gives one VM).
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('128Mi')) >= 0",message="spec.resources.memory must be at least 128Mi"
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('16Ti')) <= 0",message="spec.resources.memory must be at most 16Ti"
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// DiskSize of the boot disk, e.g. 40Gi. The disk is grown to this size
	// after cloning; it is never shrunk. At least 1Gi, at most 1Pi.
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('1Gi')) >= 0",message="spec.resources.diskSize must be at least 1Gi"
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('1Pi')) <= 0",message="spec.resources.diskSize must be at most 1Pi"
	// +optional
	DiskSize *resource.Quantity `json:"diskSize,omitempty"`
}

// IPAddressMode says how a machine gets its address.
// +kubebuilder:validation:Enum=DHCP;Static
type IPAddressMode string

const (
	IPAddressDHCP   IPAddressMode = "DHCP"
	IPAddressStatic IPAddressMode = "Static"
)

// NetworkConfig is a machine's primary interface.
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || self.ipv4.mode != 'Static' || (has(self.ipv4.addresses) && size(self.ipv4.addresses) > 0 && has(self.ipv4.gateway))",message="spec.network.ipv4.addresses and spec.network.ipv4.gateway are required when spec.network.ipv4.mode is Static"
type NetworkConfig struct {
	// Bridge, e.g. vmbr0 on Proxmox. Empty: the cluster's default bridge.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Bridge string `json:"bridge,omitempty"`
	// Model of the virtual NIC.
	// +kubebuilder:validation:Enum=virtio;e1000;vmxnet3;rtl8139
	// +kubebuilder:default=virtio
	// +optional
	Model string `json:"model,omitempty"`
	// VLANTag on the bridge.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4094
	// +optional
	VLANTag *int32 `json:"vlanTag,omitempty"`
	// IPv4 addressing. Unset: DHCP.
	// +optional
	IPv4 *IPv4Config `json:"ipv4,omitempty"`
	// DNS overrides the cluster's DNS defaults.
	// +optional
	DNS *DNSConfig `json:"dns,omitempty"`
}

// IPv4Config is DHCP, or static addresses drawn from a list.
type IPv4Config struct {
	// Mode is DHCP or Static.
	// +kubebuilder:default=DHCP
	// +optional
	Mode IPAddressMode `json:"mode,omitempty"`
	// Addresses in CIDR form (e.g. 10.0.0.21/24) that Static machines take,
	// one each, first free first.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=18
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="each address must be IPv4 in CIDR form, e.g. 10.0.0.21/24"
	// +listType=set
	// +optional
	Addresses []string `json:"addresses,omitempty"`
	// Gateway for Static mode.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="spec.network.ipv4.gateway must be an IPv4 address"
	// +optional
	Gateway string `json:"gateway,omitempty"`
}

// Placement chooses where machines go.
type Placement struct {
	// Nodes the machines may be placed on; the one with the most free memory
	// wins. Empty: any of the cluster's nodes.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// Storage pool for the machine's disks. Empty: the cluster's default.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Storage string `json:"storage,omitempty"`
}

// CloudInitConfig configures a guest on first boot.
type CloudInitConfig struct {
	// User is the default user cloud-init creates.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	// +optional
	User string `json:"user,omitempty"`
	// SSHAuthorizedKeys for that user.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	SSHAuthorizedKeys []string `json:"sshAuthorizedKeys,omitempty"`
	// UserData is cloud-init user data (#cloud-config or a script) given to
	// every machine. A claim's own user data replaces it.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	UserData string `json:"userData,omitempty"`
}

// WorkloadType is what a machine runs.
// +kubebuilder:validation:Enum=none;github-runner
type WorkloadType string

const (
	WorkloadNone         WorkloadType = "none"
	WorkloadGitHubRunner WorkloadType = "github-runner"
)

// WorkloadConfig is what a machine runs once booted.
type WorkloadConfig struct {
	// Type of workload. github-runner boots the hyperfleet-bootstrap agent,
	// which registers an ephemeral runner, runs one job and powers off.
	// +kubebuilder:default=none
	// +optional
	Type WorkloadType `json:"type,omitempty"`
	// GitHubRunner configures the bootstrap agent for github-runner.
	// +optional
	GitHubRunner *GitHubRunnerWorkload `json:"githubRunner,omitempty"`
	// CredentialsSecretRef names a Secret key (the Secret needs the
	// credentials label) with the credentials every machine of this
	// template is handed once it has attested (spec.attestation), as a JSON
	// object of strings. A claim's own spec.credentialsSecretRef wins (a
	// RunnerPool sets one per runner). Refused without attestation: without
	// it the operator cannot tell which machine is asking.
	// +optional
	CredentialsSecretRef *meta.SecretKeyReference `json:"credentialsSecretRef,omitempty"`
}

// GitHubRunnerWorkload tells the in-VM bootstrap agent how to fetch and run
// the actions runner.
type GitHubRunnerWorkload struct {
	// RunnerVersion of actions/runner, e.g. 2.321.0.
	// +kubebuilder:validation:Pattern=`^[0-9]+\.[0-9]+\.[0-9]+$`
	// +optional
	RunnerVersion string `json:"runnerVersion,omitempty"`
	// DownloadURL of the runner tarball; {version}, {os} and {arch} are
	// substituted. Empty: GitHub's release download.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	DownloadURL string `json:"downloadURL,omitempty"`
	// OS of the runner package.
	// +kubebuilder:validation:Enum=linux;win;osx
	// +kubebuilder:default=linux
	// +optional
	OS string `json:"os,omitempty"`
	// Arch of the runner package.
	// +kubebuilder:validation:Enum=x64;arm64;arm
	// +kubebuilder:default=x64
	// +optional
	Arch string `json:"arch,omitempty"`
	// WorkDir where the runner is unpacked.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:default="/opt/actions-runner"
	// +optional
	WorkDir string `json:"workDir,omitempty"`
	// ConfigScript is config.sh's path relative to workDir.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:default="config.sh"
	// +optional
	ConfigScript string `json:"configScript,omitempty"`
	// RunScript is run.sh's path relative to workDir.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:default="run.sh"
	// +optional
	RunScript string `json:"runScript,omitempty"`
	// HTTPTimeout for the agent's downloads and GitHub calls. Between 1s and
	// 10m: below a second no call completes; one call hanging for longer
	// than ten minutes is better retried.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('1s') && duration(self) <= duration('10m'))",message="spec.workload.githubRunner.httpTimeout must be a duration between 1s and 10m, e.g. 30s"
	// +optional
	HTTPTimeout *metav1.Duration `json:"httpTimeout,omitempty"`
}

// AttestationMethod is how a machine proves its identity to SPIRE.
// +kubebuilder:validation:Enum=none;join-token;tpm
type AttestationMethod string

const (
	AttestationNone      AttestationMethod = "none"
	AttestationJoinToken AttestationMethod = "join-token"
	AttestationTPM       AttestationMethod = "tpm"
)

// AttestationConfig gives machines a SPIFFE identity, independent of the workload.
type AttestationConfig struct {
	// Method: none, join-token (a one-time SPIRE join token in cloud-init),
	// or tpm (SPIRE's tpm_devid node attestor: the host provisions each
	// machine's TPM with a DevID certificate whose subject CN is the claim's
	// UID, `hyperfleet tpm-provision`; nothing secret goes into user data).
	// +kubebuilder:default=none
	// +optional
	Method AttestationMethod `json:"method,omitempty"`
	// SPIRE server the agent on the machine attests to.
	// +optional
	SPIRE *SPIREConfig `json:"spire,omitempty"`
}

// SPIREConfig locates a SPIRE server.
type SPIREConfig struct {
	// ServerAddress host:port of the SPIRE server, as the machine reaches it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	ServerAddress string `json:"serverAddress"`
	// TrustDomain, e.g. example.org.
	// +kubebuilder:validation:Pattern=`^[a-z0-9._-]+$`
	// +kubebuilder:validation:MaxLength=255
	// +required
	TrustDomain string `json:"trustDomain"`
	// AdminSocketPath is the SPIRE server's admin API socket the operator
	// uses to mint join tokens and register entries and TPM aliases. Only
	// the operator's --spire-admin-socket or a socket its administrator
	// listed with --spire-allowed-admin-socket is accepted; empty uses the
	// operator's own SPIRE server.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	AdminSocketPath string `json:"adminSocketPath,omitempty"`
	// TokenTTL of a join token; with tpm, how long a machine may take to
	// attest once its claim registered it. Between 1m and 24h: the token
	// must outlive the machine's clone and boot, and a join token valid for
	// longer than a day is a standing credential. Past it, a machine that
	// has not attested is Failed (AttestationFailed).
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+)$') && (duration(self) >= duration('1m') && duration(self) <= duration('24h'))",message="spec.attestation.spire.tokenTTL must be a duration between 1m and 24h, e.g. 10m"
	// +optional
	TokenTTL *metav1.Duration `json:"tokenTTL,omitempty"`
	// TrustBundleRef names a ConfigMap or Secret key with the SPIRE trust bundle.
	// +optional
	TrustBundleRef *meta.KeyReference `json:"trustBundleRef,omitempty"`
}

// CloneMode is how Proxmox copies the source template.
// +kubebuilder:validation:Enum=linked;full
type CloneMode string

const (
	CloneLinked CloneMode = "linked"
	CloneFull   CloneMode = "full"
)

// ProxmoxTemplateSpec says what to clone on Proxmox VE.
type ProxmoxTemplateSpec struct {
	// Source is the Proxmox template VM to clone.
	// +required
	Source ProxmoxSource `json:"source"`
	// CloneMode: linked (fast, shares the template's base disk) or full.
	// +kubebuilder:default=linked
	// +optional
	CloneMode CloneMode `json:"cloneMode,omitempty"`
	// Pool is the Proxmox resource pool the VM joins.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Pool string `json:"pool,omitempty"`
	// Tags are added to every VM cloned from this template. The tag
	// hyperfleet and every tag starting with hf- are the operator's own
	// marks and are refused.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9][a-z0-9_.+-]*$`
	// +kubebuilder:validation:items:XValidation:rule="self != 'hyperfleet' && !self.startsWith('hf-')",message="the tag hyperfleet and tags starting with hf- are reserved for the operator's ownership marks"
	// +listType=set
	// +optional
	Tags []string `json:"tags,omitempty"`
	// Disk is the disk that diskSize resizes, e.g. scsi0.
	// +kubebuilder:validation:Pattern=`^(scsi|virtio|sata|ide)[0-9]+$`
	// +kubebuilder:default=scsi0
	// +optional
	Disk string `json:"disk,omitempty"`
}

// ProxmoxSource identifies a template VM by VMID or by name.
// +kubebuilder:validation:XValidation:rule="has(self.vmid) != has(self.name)",message="spec.proxmox.source needs exactly one of vmid or name"
type ProxmoxSource struct {
	// VMID of the template.
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=999999999
	// +optional
	VMID *int32 `json:"vmid,omitempty"`
	// Name of the template; it must be unique among the cluster's templates.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Name string `json:"name,omitempty"`
	// Node holding the template. Empty: found through cluster/resources.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Node string `json:"node,omitempty"`
}

// RunStrategy mirrors KubeVirt's VirtualMachine runStrategy.
// +kubebuilder:validation:Enum=Always;RerunOnFailure;Once;Manual;Halted
type RunStrategy string

// KubeVirtTemplateSpec holds a VirtualMachine template, inline or in a ConfigMap.
// +kubebuilder:validation:XValidation:rule="has(self.virtualMachine) != has(self.templateConfigMapRef)",message="spec.kubevirt needs exactly one of virtualMachine (inline) or templateConfigMapRef"
type KubeVirtTemplateSpec struct {
	// VirtualMachine is an inline kubevirt.io/v1 VirtualMachine used as the
	// template; metadata.name and namespace are set by the operator.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	VirtualMachine *runtime.RawExtension `json:"virtualMachine,omitempty"`
	// TemplateConfigMapRef names a ConfigMap key holding a VirtualMachine
	// YAML with ${vm_name}, ${namespace}, ${cyberdesk_name}, ${managed_by}
	// and ${user_data_base64} placeholders.
	// +optional
	TemplateConfigMapRef *ConfigMapKeyReference `json:"templateConfigMapRef,omitempty"`
	// RunStrategy of the VirtualMachine, overriding the template's. The
	// default, RerunOnFailure, lets a guest that powers itself off (an
	// ephemeral runner after its job) stay off, so the claim ends; Always
	// would have KubeVirt boot it again.
	// +kubebuilder:default=RerunOnFailure
	// +optional
	RunStrategy RunStrategy `json:"runStrategy,omitempty"`
}

// ConfigMapKeyReference selects a key of a ConfigMap in the referrer's namespace.
type ConfigMapKeyReference struct {
	// Name of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key in the ConfigMap.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:default="template.yaml"
	// +optional
	Key string `json:"key,omitempty"`
}

// HypervisorMachineTemplateStatus is what the operator found of the source.
type HypervisorMachineTemplateStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Reconciling, Stalled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Provider of the referenced cluster.
	// +optional
	Provider ProviderType `json:"provider,omitempty"`
	// ResolvedSource describes the template found on the hypervisor, e.g.
	// "pve1/9000 (ubuntu-24.04)" or "configmap/cyberdesk-vm-template".
	// +optional
	ResolvedSource string `json:"resolvedSource,omitempty"`
	// Standby counts this template's standby machines.
	// +optional
	Standby *StandbyStatus `json:"standby,omitempty"`
}

// StandbyStatus counts a template's standby machines.
type StandbyStatus struct {
	// Hot machines are Ready and free for a claim to take.
	Hot int32 `json:"hot"`
	// Starting machines are being made or booted to become hot.
	Starting int32 `json:"starting"`
	// Binding machines have been taken by a claim and are being handed to it.
	Binding int32 `json:"binding"`
	// Warm machines are cloned, powered off and free for a claim to take.
	// +optional
	Warm int32 `json:"warm,omitempty"`
	// Want is how many machines the template keeps hot now: its schedule's
	// (or spec.standby.hot) plus the burst headroom, at most 100.
	// +optional
	Want int32 `json:"want,omitempty"`
	// Schedule names the window in force (spec.standby.schedules).
	// +optional
	Schedule string `json:"schedule,omitempty"`
	// HeadroomPeak is the claims in use at the last peak: the headroom is
	// the peak halved every halfLife since (spec.standby.burstHeadroom).
	// +optional
	HeadroomPeak int32 `json:"headroomPeak,omitempty"`
	// HeadroomSince is when the last peak was seen.
	// +optional
	HeadroomSince *metav1.Time `json:"headroomSince,omitempty"`
}

// HypervisorMachineTemplate is the shape of machines cloned on one
// HypervisorCluster: source, size, network, cloud-init and workload.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hmt;hmts,categories=hyperfleet
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterRef.name`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.status.provider`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.status.resolvedSource`
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.workload.type`
// +kubebuilder:printcolumn:name="Hot",type=integer,JSONPath=`.status.standby.hot`
// +kubebuilder:printcolumn:name="Warm",type=integer,JSONPath=`.status.standby.warm`,priority=1
// +kubebuilder:printcolumn:name="Want",type=integer,JSONPath=`.status.standby.want`,priority=1
// +kubebuilder:printcolumn:name="Starting",type=integer,JSONPath=`.status.standby.starting`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HypervisorMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Undecoded lists the fields this object's last decode left zero
	// (see decode.go); never serialized.
	meta.Undecoded `json:"-"`

	// +required
	Spec HypervisorMachineTemplateSpec `json:"spec"`
	// +optional
	Status HypervisorMachineTemplateStatus `json:"status,omitempty"`
}

// HypervisorMachineTemplateList is a list of HypervisorMachineTemplates.
// +kubebuilder:object:root=true
type HypervisorMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HypervisorMachineTemplate `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &HypervisorMachineTemplate{}, &HypervisorMachineTemplateList{})
}
