package providers

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// Hypervisor is what every VM backend (Proxmox VE, KubeVirt) implements. Every
// call returns quickly: long work (a clone, a boot) is started by one call and
// observed by later ones, so a reconciler never blocks a worker on a hypervisor.
// Every call is idempotent.
type Hypervisor interface {
	// Reference proposes the reference of owner's machine: deterministic,
	// so a caller that lost its record proposes the same again. The caller
	// records it before Create.
	Reference(owner Owner) MachineRef

	// NextReference proposes another reference after taken turned out to
	// belong to a machine this operator does not own (Create returned
	// ErrNameTaken). ok is false when the provider has no other to offer:
	// the name is the owner's own, and the conflict needs a person.
	NextReference(owner Owner, taken MachineRef) (ref MachineRef, ok bool)

	// Observe returns the machine's current state, or an error wrapping
	// ErrNotFound when it does not exist.
	Observe(ctx context.Context, ref MachineRef) (Machine, error)

	// Create starts making the machine, or moves its making one step on.
	// Calling it again with the same spec never makes a second machine: the
	// reference in spec is chosen by the caller and recorded before the call.
	// It returns the machine as it now is; the caller calls again (or Observe)
	// until the machine is Running. A reference taken by a machine this
	// operator does not own gives an error wrapping ErrNameTaken.
	Create(ctx context.Context, spec MachineSpec) (Machine, error)

	// PowerOff stops the machine. Powering off a stopped or absent machine
	// succeeds. It refuses (ErrNotOwned) a machine not owned by owner, or
	// marked for another installation.
	PowerOff(ctx context.Context, ref MachineRef, owner Owner) error

	// Delete removes the machine and what was made for it (disks, cloud-init
	// media). Deleting an absent machine succeeds. It refuses (ErrNotOwned) a
	// machine not owned by owner, or marked for another installation. It may need several calls: it returns
	// ErrInProgress while a power-off or removal is still running.
	Delete(ctx context.Context, ref MachineRef, owner Owner) error

	// List returns every machine this installation owns on the hypervisor,
	// for orphan sweeps and gauges, and the unmarked machines made before
	// installations (Machine.Installation ""); never another installation's.
	List(ctx context.Context) ([]Machine, error)

	// Check reports reachability, version, nodes and capacity.
	Check(ctx context.Context) (ClusterInfo, error)
}

// MachineRef identifies a machine on its hypervisor. The reconciler chooses it
// deterministically and writes it to status before Create, so a crash between
// the create call and the status write can never leave a twin or an orphan.
type MachineRef struct {
	// Name of the machine on the hypervisor.
	Name string
	// Namespace (KubeVirt) the machine lives in.
	Namespace string
	// VMID (Proxmox) of the machine.
	VMID int
	// Node (Proxmox) the machine was placed on; a hint, since VMs migrate.
	Node string
}

// String names the reference for people, in events: "name (VMID 1042)",
// or whichever of the two it has.
func (r MachineRef) String() string {
	switch {
	case r.VMID == 0:
		return r.Name
	case r.Name == "":
		return fmt.Sprintf("VMID %d", r.VMID)
	}
	return fmt.Sprintf("%s (VMID %d)", r.Name, r.VMID)
}

// MachineName is the machine name providers propose for owner:
// "hf-<namespace>-<name>", a DNS label of at most 63 characters. A hash
// suffix keeps long names unique, and names with a dot too: the dot is the
// one character of an object name a DNS label lacks, and mapped to "-"
// alone it would give "a.b" and "a-b" of one namespace the same machine
// (KubeVirt's VirtualMachine, named in the claim's namespace).
func MachineName(owner Owner) string {
	n := strings.ToLower("hf-" + owner.Namespace + "-" + owner.Name)
	n = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, n)
	if len(n) <= 63 && !strings.Contains(owner.Name, ".") {
		return strings.TrimRight(n, "-")
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(owner.Namespace + "/" + owner.Name))
	return fmt.Sprintf("%s-%08x", strings.TrimRight(n[:min(len(n), 54)], "-"), h.Sum32())
}

// Owner is the object a machine belongs to. Its UID is written onto the
// machine (Proxmox tags and description, KubeVirt labels) and checked before
// every power-off or delete.
type Owner struct {
	// UID of the owning MachineClaim.
	UID string
	// Namespace and Name of the owner, for people reading the hypervisor.
	Namespace, Name string
}

// PowerState is a machine's power state as the hypervisor reports it.
type PowerState string

const (
	// PowerProvisioning: the machine exists but is still being made (a clone
	// holds its lock, or configuration is being applied).
	PowerProvisioning PowerState = "Provisioning"
	// PowerStopped: made and powered off.
	PowerStopped PowerState = "Stopped"
	// PowerRunning: powered on.
	PowerRunning PowerState = "Running"
	// PowerFailed: the hypervisor reports the machine failed.
	PowerFailed PowerState = "Failed"
	// PowerUnknown: the hypervisor reported something else.
	PowerUnknown PowerState = "Unknown"
)

// Machine is a machine as last observed.
type Machine struct {
	Ref   MachineRef
	Owner Owner
	// Installation is the installation mark the machine carries: this
	// provider's own, or "" for a machine made before installations
	// (providers/installation.go). List never returns another's.
	Installation string
	// ProviderID is a stable identifier, e.g. proxmox://pve1/1042.
	ProviderID string
	// UID is the hypervisor's own unique identifier of the machine, when it
	// has one (a KubeVirt VirtualMachine's UID).
	UID   string
	State PowerState
	// Node the machine runs on now.
	Node string
	// Addresses the guest reports; empty until it has booted far enough.
	Addresses []string
	// Provisioned is true once Create has nothing more to do.
	Provisioned bool
	// Progress says, for people, what Create is waiting on ("cloning",
	// "resizing disk", "starting").
	Progress string
	// Created is true when this very call made the machine, so a caller
	// counts creations once even when it calls Create again.
	Created bool
	// Notices, set by the Create call that made the machine, say where it
	// departed from what the spec asked and why (a template's namespace it
	// did not honour), for the caller to tell people in a Warning event.
	Notices []string
	// Warnings say, once each, that a task the provider ran for the
	// machine succeeded with warnings (Proxmox's "WARNINGS: <n>"): the
	// machine moved on, and people may want to read the task's log.
	Warnings []string
	// WillWake: the provider (a Waker) wakes the owner when this machine can
	// move on (the task it waits for ends), so polling it sooner only costs
	// requests.
	WillWake bool
	// Warm: made as MachineSpec.Warm asked, and waiting, powered off and
	// not configured, for an owner to take it.
	Warm bool
}

// MachineSpec is everything Create needs. Provider-specific parts sit in
// their own fields; the reconciler fills the one its cluster's provider reads.
type MachineSpec struct {
	Ref   MachineRef
	Owner Owner
	// Requested is when the owner asked for the machine (its claim's
	// creationTimestamp): the order in which admission hands out clone
	// slots, the longest-waiting first.
	Requested time.Time
	// Hostname of the guest.
	Hostname string
	// CPUCores, CPUSockets, MemoryMiB and DiskGiB size the machine; zero keeps the source's.
	CPUCores, CPUSockets int
	MemoryMiB            int64
	DiskGiB              int64
	// Network of the primary interface.
	Network NetworkSpec
	// CloudInit configures the guest.
	CloudInit CloudInitSpec
	// Tags are extra labels for people (Proxmox tags).
	Tags []string
	// Proxmox is the clone source and placement on Proxmox VE.
	Proxmox *ProxmoxSpec
	// KubeVirt is the VirtualMachine template on KubeVirt.
	KubeVirt *KubeVirtSpec
	// Warm makes a warm standby machine: Create stops once it is made
	// (cloned) and reports Machine.Warm, without configuring or starting
	// it. Whoever takes it over (WarmTaker) calls Create with its own spec,
	// which configures it (user data included) and starts it.
	Warm bool
}

// KubeVirtSpec says what VirtualMachine to make on KubeVirt.
type KubeVirtSpec struct {
	// Template is a kubevirt.io/v1 VirtualMachine in YAML or JSON. It may use
	// the placeholders ${vm_name}, ${namespace}, ${managed_by} and
	// ${user_data_base64}, which the provider fills, and those of
	// Variables; any other is an error.
	Template []byte
	// TemplateSource names where Template came from, for error messages
	// ("ConfigMap hyperfleet-system/vm-template key template.yaml").
	TemplateSource string
	// Variables are placeholders of the caller's own, with their values;
	// one named like a provider's placeholder is ignored.
	Variables map[string]string
	// RunStrategy overrides the template's, when set.
	RunStrategy string
	// Labels are added to the VirtualMachine and its instance.
	Labels map[string]string
}

// NetworkSpec is a machine's primary interface.
type NetworkSpec struct {
	Bridge string
	Model  string
	VLAN   int
	// IPv4CIDR and Gateway for a static address; empty IPv4CIDR means DHCP.
	IPv4CIDR, Gateway string
	Nameservers       []string
	SearchDomain      string
}

// CloudInitSpec configures a guest on first boot.
type CloudInitSpec struct {
	User              string
	SSHAuthorizedKeys []string
	// UserData is the full cloud-init user data; it may carry credentials
	// (a runner token), so providers never log it.
	UserData string
}

// ProxmoxSpec says what to clone on Proxmox VE and where.
type ProxmoxSpec struct {
	// SourceVMID or SourceName identifies the template.
	SourceVMID int
	SourceName string
	SourceNode string
	// FullClone copies the disks instead of linking them to the template.
	FullClone bool
	// Nodes the machine may go on (empty: any); the one with most free memory wins.
	Nodes []string
	// Storage for the machine's disks; empty keeps the template's.
	Storage string
	// Pool is the Proxmox resource pool.
	Pool string
	// Disk is the disk DiskGiB resizes, e.g. scsi0.
	Disk string
}

// ClusterInfo is what Check found.
type ClusterInfo struct {
	Version string
	Nodes   []NodeInfo
}

// NodeInfo is one hypervisor node.
type NodeInfo struct {
	Name                    string
	Online                  bool
	CPUs                    int
	MemoryTotal, MemoryFree int64
}

// TemplateChecker is implemented by providers whose machine sources live on
// the hypervisor (a Proxmox template VM), so a HypervisorMachineTemplate can
// report whether its source exists before any claim uses it.
type TemplateChecker interface {
	// CheckTemplate resolves spec's source and describes it for people, e.g.
	// "pve1/9000 (ubuntu-24.04)".
	CheckTemplate(ctx context.Context, spec MachineSpec) (string, error)
}
