package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Provider implements providers.Hypervisor on a Proxmox VE cluster.
type Provider struct {
	cfg       Config
	client    *proxmox.Client
	admission *admission

	// tasks are the Proxmox tasks this provider started and still watches,
	// by VMID: a clone holds an admission slot until its task ends.
	// watchers are the nodes whose task listing a goroutine polls
	// (taskwatch.go).
	mu       sync.Mutex
	tasks    map[int]*watchedTask
	watchers map[string]bool
	// warned holds, by VMID, what tasks that succeeded with warnings said,
	// until Create or Observe hands it to the caller (Machine.Warnings).
	warned map[int][]string
	// wake is called with the owner of a machine that can move on (OnWake).
	wake atomic.Pointer[func(providers.Owner)]

	cacheMu  sync.Mutex
	cached   proxmox.ClusterResources
	cachedAt time.Time

	// syncedAt is when admission last counted Proxmox's running clones
	// (syncAdmission); zero until the first clone.
	syncMu   sync.Mutex
	syncedAt time.Time

	// now is the clock for task timeouts; tests replace it.
	now func() time.Time
}

var (
	_ providers.Hypervisor = (*Provider)(nil)
	_ providers.Waker      = (*Provider)(nil)
)

// New validates cfg and builds a provider. It makes no request.
func New(cfg Config) (*Provider, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	client, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	p := &Provider{
		cfg:       cfg,
		client:    client,
		admission: newAdmission(cfg.MaxClonesPerNode, cfg.MaxClonesPerStorage),
		tasks:     map[int]*watchedTask{},
		warned:    map[int][]string{},
		watchers:  map[string]bool{},
		now:       time.Now,
	}
	p.admission.wake = p.notify
	return p, nil
}

// Check reports the Proxmox version and its nodes.
func (p *Provider) Check(ctx context.Context) (providers.ClusterInfo, error) {
	v, err := p.client.Version(ctx)
	if err != nil {
		return providers.ClusterInfo{}, classify("reading the Proxmox version", err)
	}
	nodes, err := p.client.Nodes(ctx)
	if err != nil {
		return providers.ClusterInfo{}, classify("listing Proxmox nodes", err)
	}
	info := providers.ClusterInfo{Version: v.Version}
	for _, n := range nodes {
		if n == nil || (len(p.cfg.Nodes) > 0 && !slices.Contains(p.cfg.Nodes, n.Node)) {
			continue
		}
		info.Nodes = append(info.Nodes, providers.NodeInfo{
			Name: n.Node, Online: n.Status == "online", CPUs: n.MaxCPU,
			MemoryTotal: int64(n.MaxMem), MemoryFree: int64(n.MaxMem) - int64(n.Mem), //nolint:gosec // node memory fits int64
		})
	}
	slices.SortFunc(info.Nodes, func(a, b providers.NodeInfo) int { return strings.Compare(a.Name, b.Name) })
	if len(p.cfg.Nodes) > 0 && len(info.Nodes) == 0 {
		return info, providers.Permanent("NodesNotFound",
			fmt.Sprintf("none of the nodes in spec.proxmox.nodes (%v) exist in the Proxmox cluster", p.cfg.Nodes), nil)
	}
	return info, nil
}

// Observe reads the VM's state, owner and addresses.
func (p *Provider) Observe(ctx context.Context, ref providers.MachineRef) (providers.Machine, error) {
	m, err := p.observe(ctx, ref)
	if err == nil {
		m.Warnings = p.taskWarnings(ref.VMID)
	}
	return m, err
}

func (p *Provider) observe(ctx context.Context, ref providers.MachineRef) (providers.Machine, error) {
	vm, err := p.find(ctx, ref)
	if err != nil {
		return providers.Machine{}, err
	}
	if err := p.taskError(ctx, ref.VMID); err != nil {
		return p.machine(vm), err
	}
	m := p.machine(vm)
	if kind, busy := p.pending(ref.VMID); busy {
		markBusy(&m, kind)
		return m, nil
	}
	if m.State == providers.PowerRunning {
		m.Addresses = p.addresses(ctx, vm)
		// The guest agent answered: the guest has read its user data.
		if len(m.Addresses) > 0 && m.Provisioned {
			p.ejectUserData(ctx, vm)
		}
	}
	return m, nil
}

// List returns the VMs this installation owns: tagged, or (mid-clone,
// before tags) named hf-* with our owner line in the description; and the
// unmarked ones made before installations. Another installation's VMs are
// left out.
func (p *Provider) List(ctx context.Context) ([]providers.Machine, error) {
	rs, err := p.resources(ctx, "vm")
	if err != nil {
		return nil, err
	}
	var out []providers.Machine
	for _, r := range rs {
		if r == nil || r.Type != "qemu" || r.Template == 1 {
			continue
		}
		tags := splitTags(r.Tags)
		ref := providers.MachineRef{Name: r.Name, VMID: int(r.VMID), Node: r.Node} //nolint:gosec // VMIDs fit int
		switch {
		case slices.Contains(tags, managedTag):
			if foreign(tags, "", p.cfg.Installation) {
				continue
			}
			out = append(out, providers.Machine{
				Ref: ref, Owner: providers.Owner{UID: ownerUID(tags, "")}, Installation: installationOf(tags, ""),
				ProviderID: providerID(r.Node, ref.VMID), State: powerState(r.Status, ""), Node: r.Node,
			})
		case len(r.Name) > len(namePrefixForList) && r.Name[:len(namePrefixForList)] == namePrefixForList:
			vm, err := p.find(ctx, ref)
			if err != nil {
				continue
			}
			if m := p.machine(vm); m.Owner.UID != "" && (m.Installation == "" || m.Installation == p.cfg.Installation) {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// find loads a VM by VMID, on its recorded node first, else wherever the
// cluster says it is (it may have migrated).
func (p *Provider) find(ctx context.Context, ref providers.MachineRef) (*proxmox.VirtualMachine, error) {
	if ref.VMID == 0 {
		return nil, fmt.Errorf("no VMID recorded: %w", providers.ErrNotFound)
	}
	if ref.Node != "" {
		vm, err := p.load(ctx, ref.Node, ref.VMID)
		if err == nil || !errors.Is(err, providers.ErrNotFound) {
			return vm, err
		}
	}
	node, err := p.nodeOf(ctx, ref.VMID)
	if err != nil {
		return nil, err
	}
	return p.load(ctx, node, ref.VMID)
}

func (p *Provider) load(ctx context.Context, node string, vmid int) (*proxmox.VirtualMachine, error) {
	// A node handle without client.Node's GET /nodes/{node}/status: the VM
	// lookup itself reports a node that is gone or offline.
	n := (&proxmox.Node{}).New(p.client, node)
	vm, err := n.VirtualMachine(ctx, vmid)
	if err != nil {
		return nil, classify(fmt.Sprintf("reading VM %d on %s", vmid, node), err)
	}
	return vm, nil
}

// nodeOf finds the node holding vmid through cluster/resources, after a
// cheap check that the VMID is in use at all.
func (p *Provider) nodeOf(ctx context.Context, vmid int) (string, error) {
	free, err := p.vmidFree(ctx, vmid)
	if err != nil {
		return "", err
	}
	if free {
		return "", fmt.Errorf("VM %d: %w", vmid, providers.ErrNotFound)
	}
	rs, err := p.resources(ctx, "vm")
	if err != nil {
		return "", err
	}
	for _, r := range rs {
		if r != nil && int(r.VMID) == vmid { //nolint:gosec // VMIDs fit int
			return r.Node, nil
		}
	}
	return "", fmt.Errorf("VM %d: %w", vmid, providers.ErrNotFound)
}

// machine converts a loaded VM into the contract's Machine.
func (p *Provider) machine(vm *proxmox.VirtualMachine) providers.Machine {
	var desc string
	tags := splitTags(vm.Tags)
	if c := vm.VirtualMachineConfig; c != nil {
		desc = c.Description
		if len(tags) == 0 {
			tags = splitTags(c.Tags)
		}
	}
	vmid := int(vm.VMID) //nolint:gosec // VMIDs fit int
	m := providers.Machine{
		Ref:          providers.MachineRef{Name: vm.Name, VMID: vmid, Node: vm.Node},
		Owner:        providers.Owner{UID: ownerUID(tags, desc)},
		Installation: installationOf(tags, desc),
		ProviderID:   providerID(vm.Node, vmid),
		State:        powerState(vm.Status, vm.Lock),
		Node:         vm.Node,
	}
	if vm.Lock != "" {
		m.Progress = "locked by Proxmox (" + vm.Lock + ")"
	}
	m.Provisioned = slices.Contains(tags, startedTag)
	return m
}

func powerState(status, lock string) providers.PowerState {
	if lock != "" {
		return providers.PowerProvisioning
	}
	switch status {
	case "running":
		return providers.PowerRunning
	case "stopped":
		return providers.PowerStopped
	}
	return providers.PowerUnknown
}

func providerID(node string, vmid int) string { return fmt.Sprintf("proxmox://%s/%d", node, vmid) }

// addresses asks the guest agent for IPv4 addresses; none until it answers.
func (p *Provider) addresses(ctx context.Context, vm *proxmox.VirtualMachine) []string {
	ifaces, err := vm.AgentGetNetworkIFaces(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, iface := range ifaces {
		if iface == nil || iface.Name == "lo" {
			continue
		}
		for _, a := range iface.IPAddresses {
			if a != nil && a.IPAddressType == "ipv4" && a.IPAddress != "" {
				out = append(out, a.IPAddress)
			}
		}
	}
	return out
}

// CheckTemplate resolves the template by VMID or name.
func (p *Provider) CheckTemplate(ctx context.Context, spec providers.MachineSpec) (string, error) {
	if spec.Proxmox == nil {
		return "", providers.Permanent("InvalidSpec", "the template has no spec.proxmox section", nil)
	}
	rs, err := p.resources(ctx, "vm")
	if err != nil {
		return "", err
	}
	src, err := resolveTemplate(rs, spec.Proxmox)
	if err != nil {
		return "", err
	}
	if err := checkTenantTags("spec.proxmox.tags of the HypervisorMachineTemplate", spec.Tags); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%d (%s)", src.Node, src.VMID, src.Name), nil
}

// markBusy reports a machine with a task of ours still running (a start, a
// disk resize) as provisioning: a VM whose start task has not finished is
// stopped, and must not be taken for one that shut itself down.
func markBusy(m *providers.Machine, kind string) {
	// The node's watcher wakes the owner when the task ends.
	m.WillWake = true
	if kind == "Stop" || kind == "Delete" {
		return
	}
	m.State = providers.PowerProvisioning
	m.Progress = strings.ToLower(kind) + " in progress"
}

// resources lists cluster/resources, optionally of one type ("vm", "node",
// "storage"). It asks for the listing directly: go-proxmox's Cluster() would
// first fetch /cluster/status, doubling the requests of every lookup.
func (p *Provider) resources(ctx context.Context, filter ...string) (proxmox.ClusterResources, error) {
	path := "/cluster/resources"
	if len(filter) > 0 && filter[0] != "" {
		path += "?" + url.Values{"type": {filter[0]}}.Encode()
	}
	var rs proxmox.ClusterResources
	if err := p.client.Get(ctx, path, &rs); err != nil {
		return nil, classify("listing Proxmox resources", err)
	}
	return rs, nil
}

// placementResources returns the whole cluster/resources listing, reused for
// up to placementCacheTTL: a burst of queued claims retries placement every
// few seconds, and listing every VM for each retry grows as claims × VMs.
// It only feeds template resolution and node choice, never a decision that a
// VM does not exist, so a listing a moment old cannot lead to a twin.
func (p *Provider) placementResources(ctx context.Context) (proxmox.ClusterResources, error) {
	p.cacheMu.Lock()
	defer p.cacheMu.Unlock()
	if p.cached != nil && time.Since(p.cachedAt) < placementCacheTTL {
		return p.cached, nil
	}
	rs, err := p.resources(ctx)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	p.cached, p.cachedAt = rs, at
	// Let the listing go once it is too old to be used: it holds every VM of
	// the cluster (megabytes with thousands of VMs) and would otherwise stay
	// in memory until the next placement, which may be hours away.
	time.AfterFunc(placementCacheTTL, func() {
		p.cacheMu.Lock()
		defer p.cacheMu.Unlock()
		if p.cachedAt.Equal(at) {
			p.cached = nil
		}
	})
	return rs, nil
}

// placementCacheTTL bounds how old a listing used for placement may be.
const placementCacheTTL = 2 * time.Second

// vmidFree asks /cluster/nextid?vmid=N, which answers without listing every
// VM, whether the VMID is unused.
func (p *Provider) vmidFree(ctx context.Context, vmid int) (bool, error) {
	var id any
	err := p.client.Get(ctx, fmt.Sprintf("/cluster/nextid?vmid=%d", vmid), &id)
	switch {
	case err == nil:
		return true, nil
	case strings.Contains(err.Error(), "already exists"):
		return false, nil
	}
	return false, classify(fmt.Sprintf("checking whether VMID %d is free", vmid), err)
}
