package proxmoxsim

import (
	"log"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// Node describes one simulated cluster node, so tests can shape the cluster
// the operator places VMs on.
type Node struct {
	// Name is the node name used in API paths (/nodes/{Name}/...).
	Name string
	// CPUs is the number of logical CPUs the node reports (maxcpu).
	CPUs int
	// Memory is the node's RAM in bytes (maxmem).
	Memory uint64
	// Offline starts the node offline; SetNodeOnline changes it later.
	Offline bool
}

// Storage describes one storage of the cluster, so tests can model local,
// thin-provisioned and shared storages the way a real datacenter has them.
type Storage struct {
	// Name is the storage ID (e.g. "local-lvm").
	Name string
	// Type is the storage plugin type: "dir", "lvmthin", "nfs", "rbd", ...
	// File-based types (dir, nfs, cifs, cephfs, glusterfs, btrfs) accept uploads.
	Type string
	// Content lists the content types the storage holds: images, rootdir,
	// iso, vztmpl, snippets, backup, import.
	Content []string
	// Shared marks a storage every node sees as one (one set of volumes and
	// one lock); a non-shared storage exists once per node.
	Shared bool
	// Nodes restricts the storage to these nodes; empty means every node.
	Nodes []string
	// Capacity is the size in bytes reported as total; 0 picks a default.
	Capacity uint64
}

// Latencies sets how long simulated work takes, so tests run fast while the
// sandbox and the benchmark can see realistic timing. A zero Latencies value
// in Options means DefaultLatencies; within a non-zero value a zero or
// negative field means "no delay".
type Latencies struct {
	// API delays every API answer (network plus pveproxy overhead).
	API time.Duration
	// Clone is the duration of a qmclone task, counted from the moment its
	// temporary config appears (after CloneConfigLag).
	Clone time.Duration
	// CloneConfigLag is how long after the clone call answers (with its UPID)
	// the new VMID's temporary config ("lock: clone") appears. Proxmox VE
	// checks only that the config does not exist yet before forking the
	// qmclone worker; the worker takes the VMID's config lock and writes the
	// temporary file itself, so until then the VMID looks free (to
	// /cluster/nextid, to a GET of the VM, to a second clone call). Zero
	// writes the temporary config before the call answers.
	CloneConfigLag time.Duration
	// StorageLock is the part of a clone during which it holds the target
	// storage's lock; zero or more than Clone means the whole clone.
	StorageLock time.Duration
	// Start is the duration of a qmstart task, until the VM is running.
	Start time.Duration
	// Boot is the time from "running" until the guest agent answers and
	// reports the VM's IP address.
	Boot time.Duration
	// Shutdown is the duration of a qmshutdown task.
	Shutdown time.Duration
	// Stop is the duration of a qmstop task.
	Stop time.Duration
	// Delete is the duration of a qmdestroy task.
	Delete time.Duration
	// Config is the duration of an asynchronous qmconfig task and of a
	// synchronous (PUT) config update.
	Config time.Duration
	// Resize is the duration of a resize task.
	Resize time.Duration
	// Upload is the duration of imgcopy (upload) and imgdel tasks.
	Upload time.Duration
}

// DefaultLatencies returns latencies short enough for unit and integration
// tests (tens of milliseconds) yet long enough that tasks are seen running.
func DefaultLatencies() Latencies {
	return Latencies{
		API:            time.Millisecond,
		Clone:          60 * time.Millisecond,
		CloneConfigLag: 5 * time.Millisecond,
		Start:          30 * time.Millisecond,
		Boot:           50 * time.Millisecond,
		Shutdown:       30 * time.Millisecond,
		Stop:           10 * time.Millisecond,
		Delete:         30 * time.Millisecond,
		Config:         10 * time.Millisecond,
		Resize:         10 * time.Millisecond,
		Upload:         10 * time.Millisecond,
	}
}

// Realistic returns latencies close to a small real cluster with thin-LVM
// storage, for the developer sandbox and the benchmark.
func Realistic() Latencies {
	return Latencies{
		API:   15 * time.Millisecond,
		Clone: 2 * time.Second,
		// fork_worker plus taking the source's and the new VMID's config
		// locks before the temporary file is written.
		CloneConfigLag: 300 * time.Millisecond,
		StorageLock:    1500 * time.Millisecond,
		Start:          time.Second,
		Boot:           3 * time.Second,
		Shutdown:       2 * time.Second,
		Stop:           500 * time.Millisecond,
		Delete:         time.Second,
		Config:         200 * time.Millisecond,
		Resize:         500 * time.Millisecond,
		Upload:         time.Second,
	}
}

// Options configures a Server. The zero value gives a two-node cluster with
// the usual local and local-lvm storages, test latencies and a random API
// token secret.
type Options struct {
	// Nodes are the cluster nodes; default pve1 and pve2 with 16 CPUs and 64 GiB.
	Nodes []Node
	// Storages are the cluster's storages; default per node "local" (dir:
	// iso, vztmpl, snippets, backup) and "local-lvm" (lvmthin: images, rootdir).
	Storages []Storage
	// Latencies sets task and API timing; the zero value means DefaultLatencies.
	Latencies Latencies
	// StorageLockLimit is how many clones may hold one storage's lock at once;
	// the excess clone tasks fail the way Proxmox's lock timeout does.
	// 0 means 3; a negative value means no limit.
	StorageLockLimit int
	// APITokenID is the accepted API token ID; default "root@pam!hyperfleet".
	APITokenID string
	// APITokenSecret is the token's secret; default a random UUID.
	APITokenSecret string
	// Username is the user accepted by /access/ticket; default "root@pam".
	Username string
	// Password is that user's password; default a random string.
	Password string
	// TicketLifetime is how long a login ticket stays valid; default 2h as in Proxmox.
	TicketLifetime time.Duration
	// Version is the reported Proxmox VE version; default "8.2.4".
	Version string
	// ClusterName is the name /cluster/status reports; default "hyperfleet-sim".
	ClusterName string
	// TagOrdering is the datacenter's tag-style ordering: "" (Proxmox's
	// default) stores a VM's tags sorted, TagOrderingConfig as written.
	TagOrdering string
	// TagCaseSensitive is the datacenter's tag-style case-sensitive: tags
	// keep their case, and differ by it. By default Proxmox lowercases them.
	TagCaseSensitive bool
	// ErrorLog receives the HTTPS server's own errors, such as TLS handshakes
	// refused by clients that do not trust CACertPEM; nil discards them.
	ErrorLog *log.Logger
}

// TagOrderingConfig keeps tags in the order written (datacenter.cfg
// tag-style ordering=config).
const TagOrderingConfig = "config"

const (
	defaultTokenID = "root@pam!hyperfleet"
	defaultUser    = "root@pam"
	defaultVersion = "8.2.4"
	gib            = uint64(1) << 30
)

// withDefaults returns a copy of o with every unset field filled in.
func (o Options) withDefaults() Options {
	if len(o.Nodes) == 0 {
		o.Nodes = []Node{
			{Name: "pve1", CPUs: 16, Memory: 64 * gib},
			{Name: "pve2", CPUs: 16, Memory: 64 * gib},
		}
	} else {
		o.Nodes = append([]Node(nil), o.Nodes...)
	}
	for i := range o.Nodes {
		if o.Nodes[i].CPUs <= 0 {
			o.Nodes[i].CPUs = 16
		}
		if o.Nodes[i].Memory == 0 {
			o.Nodes[i].Memory = 64 * gib
		}
	}
	if len(o.Storages) == 0 {
		o.Storages = []Storage{
			{Name: "local", Type: "dir", Content: []string{"iso", "vztmpl", "snippets", "backup"}},
			{Name: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
		}
	} else {
		cp := make([]Storage, len(o.Storages))
		for i, st := range o.Storages {
			st.Content = append([]string(nil), st.Content...)
			st.Nodes = append([]string(nil), st.Nodes...)
			cp[i] = st
		}
		o.Storages = cp
	}
	for i := range o.Storages {
		if o.Storages[i].Type == "" {
			o.Storages[i].Type = "dir"
		}
		if o.Storages[i].Capacity == 0 {
			if isFileStorage(o.Storages[i].Type) {
				o.Storages[i].Capacity = 100 * gib
			} else {
				o.Storages[i].Capacity = 1024 * gib
			}
		}
	}
	if o.Latencies == (Latencies{}) {
		o.Latencies = DefaultLatencies()
	}
	if o.StorageLockLimit == 0 {
		o.StorageLockLimit = 3
	}
	if o.APITokenID == "" {
		o.APITokenID = defaultTokenID
	}
	if o.APITokenSecret == "" {
		o.APITokenSecret = simkit.RandomUUID()
	}
	if o.Username == "" {
		o.Username = defaultUser
	}
	if o.Password == "" {
		o.Password = simkit.RandomUUID()
	}
	if o.TicketLifetime <= 0 {
		o.TicketLifetime = 2 * time.Hour
	}
	if o.Version == "" {
		o.Version = defaultVersion
	}
	if o.ClusterName == "" {
		o.ClusterName = "hyperfleet-sim"
	}
	return o
}

// isFileStorage reports whether a storage type keeps files in a directory,
// which is what Proxmox requires for uploads.
func isFileStorage(typ string) bool {
	switch typ {
	case "dir", "nfs", "cifs", "cephfs", "glusterfs", "btrfs":
		return true
	}
	return false
}
