package proxmox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Create moves the machine one step on each call:
//
//	absent → clone (admission permitting) → configure (tags, size, network,
//	cloud-init) and at once grow the disk, or tag started and power on →
//	(after a resize) tag started and power on.
//
// Each step is decided from what Proxmox shows, so a call after a crash picks
// up where the last one stopped, and a VMID that turns out to belong to
// someone else is reported (ErrNameTaken) rather than touched. Ownership is
// read from the description the clone call sets, which Proxmox writes only
// when the clone finishes; until then a clone-locked VM counts as in progress.
func (p *Provider) Create(ctx context.Context, spec providers.MachineSpec) (providers.Machine, error) {
	m, err := p.create(ctx, spec)
	if err == nil {
		m.Warnings = p.taskWarnings(spec.Ref.VMID)
	}
	return m, err
}

func (p *Provider) create(ctx context.Context, spec providers.MachineSpec) (providers.Machine, error) {
	if spec.Ref.VMID < 100 || spec.Proxmox == nil || spec.Owner.UID == "" {
		return providers.Machine{}, providers.Permanent("InvalidSpec", "a Proxmox machine needs a VMID ≥ 100, a source template and an owner", nil)
	}
	if err := checkTenantTags("spec.proxmox.tags of the HypervisorMachineTemplate", spec.Tags); err != nil {
		return providers.Machine{}, err
	}
	if err := p.taskError(ctx, spec.Ref.VMID); err != nil {
		return providers.Machine{}, err
	}
	vm, err := p.find(ctx, spec.Ref)
	if errors.Is(err, providers.ErrNotFound) {
		if kind, ok := p.pending(spec.Ref.VMID); ok {
			// A clone we started is not visible yet; do not start another.
			m := provisioning(spec, kind)
			m.WillWake = true
			return m, nil
		}
		return p.clone(ctx, spec)
	}
	if err != nil {
		return providers.Machine{}, err
	}
	tags := splitTags(vm.Tags)
	desc := ""
	if vm.VirtualMachineConfig != nil {
		desc = vm.VirtualMachineConfig.Description
		tags = splitTags(vm.VirtualMachineConfig.Tags)
	}
	if vm.Lock == "clone" && unmarked(tags, desc) {
		// Mid-clone, Proxmox shows only a temporary config: no name, tags or
		// description yet. Whose clone it is shows once it finishes.
		m := provisioning(spec, "cloning")
		m.Node = vm.Node
		return m, nil
	}
	if marks := readMarks(tags, desc); marks.conflicting() {
		if tags, err = p.ownTags(ctx, spec, tags, desc); err != nil {
			return providers.Machine{}, err
		}
	}
	if !ownedBy(tags, desc, spec.Owner, p.cfg.Installation) {
		if marks := readMarks(tags, desc); marks.conflicting() {
			return providers.Machine{}, conflictError(spec.Ref.VMID, vm.Node, marks, providers.ErrNameTaken)
		}
		return providers.Machine{}, fmt.Errorf("VM %d on %s: %w", spec.Ref.VMID, vm.Node, providers.ErrNameTaken)
	}
	m := p.machine(vm)
	if vm.Lock != "" {
		m.Progress = "cloning"
		return m, nil
	}
	if kind, busy := p.pending(spec.Ref.VMID); busy {
		markBusy(&m, kind)
		return m, nil
	}
	if spec.Warm && !slices.Contains(tags, ownerTag(spec.Owner.UID)) {
		// A warm standby machine: cloned, never configured or started.
		// The owner tag marks a configured VM; whoever takes this one over
		// configures it with its own spec (ChangeOwner leaves it unmarked).
		m.Warm = true
		m.Progress = "warm: cloned and powered off"
		return m, nil
	}
	if !slices.Contains(tags, ownerTag(spec.Owner.UID)) {
		written, err := p.configure(ctx, vm, spec)
		if err != nil {
			return m, err
		}
		// Configuring is synchronous: go straight on to the next step, which
		// needs nothing configure changed but the tags it returns.
		tags = written
		m.Progress = "configured"
	}
	switch {
	case !slices.Contains(tags, installationTag(p.cfg.Installation)):
		// Made before installations: mark it, so this installation's sweeper
		// and List know it as ours.
		if err := p.markInstallation(ctx, vm, tags); err != nil {
			return m, err
		}
		m.Installation = p.cfg.Installation
	case p.needsResize(vm, spec):
		task, err := vm.ResizeDisk(ctx, diskName(spec), fmt.Sprintf("%dG", spec.DiskGiB))
		if err != nil {
			return m, classify(fmt.Sprintf("growing disk of VM %d", spec.Ref.VMID), err)
		}
		p.watch(spec.Ref.VMID, "Resize", task, spec.Owner)
		m.Progress = "growing disk"
	case !slices.Contains(tags, startedTag):
		// Tag before starting, so List and Observe know the VM was started;
		// whether a stopped VM shut itself down is decided by the reconciler,
		// from having seen it run.
		if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "tags", Value: joinTags(append(tags, startedTag))}); err != nil {
			return m, classify(fmt.Sprintf("tagging VM %d started", spec.Ref.VMID), err)
		}
		task, err := vm.Start(ctx)
		if err != nil {
			return m, classify(fmt.Sprintf("starting VM %d", spec.Ref.VMID), err)
		}
		p.watch(spec.Ref.VMID, "Start", task, spec.Owner)
		m.Provisioned = true
		markBusy(&m, "Start")
	case vm.Status == "stopped":
		// Tagged started yet stopped, and the caller still calls Create: it
		// has never seen this VM run (it switches to Observe once it has), so
		// a start was interrupted — by an operator restart or failover right
		// after the call. Start it again; a VM seen running and then stopped
		// is the reconciler's to retire, never restarted.
		task, err := vm.Start(ctx)
		if err != nil {
			return m, classify(fmt.Sprintf("starting VM %d again", spec.Ref.VMID), err)
		}
		p.watch(spec.Ref.VMID, "Start", task, spec.Owner)
		m.Provisioned = true
		markBusy(&m, "Start")
	default:
		m.Provisioned = true
		if m.State == providers.PowerRunning {
			m.Addresses = p.addresses(ctx, vm)
		}
	}
	return m, nil
}

func provisioning(spec providers.MachineSpec, progress string) providers.Machine {
	return providers.Machine{
		Ref: spec.Ref, Owner: spec.Owner, ProviderID: providerID(spec.Ref.Node, spec.Ref.VMID),
		State: providers.PowerProvisioning, Node: spec.Ref.Node, Progress: strings.ToLower(progress),
	}
}

// clone resolves the template, picks a node with a free clone slot and starts
// the clone. The description carries the owner from the first instant.
func (p *Provider) clone(ctx context.Context, spec providers.MachineSpec) (providers.Machine, error) {
	src, w, storage, err := p.placement(ctx, spec)
	if err != nil {
		return providers.Machine{}, err
	}
	node, ok := p.admission.admit(w, true)
	if !ok {
		return providers.Machine{}, p.queued()
	}
	srcVM := &proxmox.VirtualMachine{}
	srcVM.New(p.client, src.Node, int(src.VMID)) //nolint:gosec // VMIDs fit int
	opts := &proxmox.VirtualMachineCloneOptions{
		NewID:       spec.Ref.VMID,
		Name:        spec.Ref.Name,
		Description: description(spec.Owner, p.cfg.Installation),
		Pool:        spec.Proxmox.Pool,
	}
	if node != src.Node {
		opts.Target = node
	}
	if spec.Proxmox.FullClone {
		opts.Full = true
		opts.Storage = storage
	}
	_, task, err := srcVM.Clone(ctx, opts)
	if err != nil {
		p.admission.release(spec.Ref.VMID)
		if vmidTaken(err) {
			return p.cloneRefused(ctx, spec, err)
		}
		return providers.Machine{}, classify(fmt.Sprintf("cloning template %d to VM %d", src.VMID, spec.Ref.VMID), err)
	}
	p.watch(spec.Ref.VMID, "Clone", task, spec.Owner)
	ref := spec.Ref
	ref.Node = node
	spec.Ref = ref
	m := provisioning(spec, "cloning")
	m.WillWake = true
	return m, nil
}

// cloneRefused decides what a clone call refused with "config file already
// exists" means. Our look found no VM, yet the call found its config: on
// Proxmox the temporary config is written by the clone's worker some time
// after its call answers, so a clone started by a previous process (a
// restart, a failover) can surface just between the two. The rule is the one
// Create applies: a clone-locked config with no owner yet is our clone in
// progress; an owned one continues if ours; anything else means the VMID is
// someone else's, and only then does the caller move to another.
func (p *Provider) cloneRefused(ctx context.Context, spec providers.MachineSpec, refused error) (providers.Machine, error) {
	vm, err := p.find(ctx, providers.MachineRef{VMID: spec.Ref.VMID})
	if errors.Is(err, providers.ErrNotFound) {
		// Gone again (a failed clone removes its config): look again later.
		return providers.Machine{}, providers.Transient("CloneRaced", 3*time.Second,
			fmt.Errorf("cloning to VM %d: %w, and it is gone again", spec.Ref.VMID, refused))
	}
	if err != nil {
		return providers.Machine{}, err
	}
	var tags []string
	desc := ""
	if c := vm.VirtualMachineConfig; c != nil {
		tags, desc = splitTags(c.Tags), c.Description
	}
	switch {
	case vm.Lock == "clone" && unmarked(tags, desc):
		m := provisioning(spec, "cloning")
		m.Node = vm.Node
		return m, nil
	case ownedBy(tags, desc, spec.Owner, p.cfg.Installation):
		return p.machine(vm), nil
	}
	if marks := readMarks(tags, desc); marks.conflicting() {
		return providers.Machine{}, fmt.Errorf("cloning to VM %d: %w: %w", spec.Ref.VMID, conflictError(spec.Ref.VMID, vm.Node, marks, providers.ErrNameTaken), refused)
	}
	return providers.Machine{}, fmt.Errorf("cloning to VM %d on %s: %w: %w", spec.Ref.VMID, vm.Node, providers.ErrNameTaken, refused)
}

// ownTags returns the tags of a VM whose marks disagree as HyperFleet
// wrote them, when it can tell: a clone not configured yet (it does not
// carry its owner's tag) still has its template's tags, and a template
// that itself carries a reserved tag would otherwise make every clone of it
// look foreign, and the claim clone again and again. For such a VM the
// marks the template gave it are set aside, and ownership is decided from
// what the operator wrote: the description of the clone call. Configuring
// then drops them. Any other VM keeps its tags, and its conflict stands.
func (p *Provider) ownTags(ctx context.Context, spec providers.MachineSpec, tags []string, desc string) ([]string, error) {
	if slices.Contains(tags, ownerTag(spec.Owner.UID)) {
		return tags, nil
	}
	rs, err := p.placementResources(ctx)
	if err != nil {
		return nil, err
	}
	src, err := resolveTemplate(rs, spec.Proxmox)
	if err != nil {
		// Without its template, nothing can be set aside.
		return tags, nil //nolint:nilerr // the conflict is reported by the caller
	}
	inherited := splitTags(src.Tags)
	own := slices.DeleteFunc(slices.Clone(tags), func(t string) bool {
		_, reserved := reservedPrefix(t)
		return reserved && slices.Contains(inherited, t)
	})
	return own, nil
}

// resolveTemplate finds the template by VMID or by unique name.
func resolveTemplate(rs proxmox.ClusterResources, src *providers.ProxmoxSpec) (*proxmox.ClusterResource, error) {
	var found []*proxmox.ClusterResource
	for _, r := range rs {
		if r == nil || r.Type != "qemu" {
			continue
		}
		if (src.SourceVMID != 0 && int(r.VMID) == src.SourceVMID) || //nolint:gosec // VMIDs fit int
			(src.SourceVMID == 0 && r.Name == src.SourceName) {
			found = append(found, r)
		}
	}
	what := fmt.Sprintf("VMID %d", src.SourceVMID)
	if src.SourceVMID == 0 {
		what = fmt.Sprintf("name %q", src.SourceName)
	}
	switch {
	case len(found) == 0:
		return nil, providers.Permanent("TemplateNotFound", fmt.Sprintf("no VM with %s exists in the Proxmox cluster: check spec.proxmox.source", what), nil)
	case len(found) > 1:
		return nil, providers.Permanent("TemplateAmbiguous", fmt.Sprintf("%d VMs have %s: name the template by vmid", len(found), what), nil)
	case found[0].Template != 1:
		return nil, providers.Permanent("SourceNotATemplate", fmt.Sprintf("the VM with %s is not a template: convert it (qm template) or name another", what), nil)
	}
	return found[0], nil
}

// place picks the target node: the best candidate with a free clone slot,
// else the best candidate. It returns the node and the storage key
// admission counts.
func (p *Provider) place(rs proxmox.ClusterResources, src *proxmox.ClusterResource, spec *providers.ProxmoxSpec, storage string, memMiB int64) (string, string, error) {
	nodes, slotStorage, err := p.candidates(rs, src, spec, storage, memMiB)
	if err != nil {
		return "", "", err
	}
	for _, n := range nodes {
		if p.admission.free(n, slotStorage) {
			return n, slotStorage, nil
		}
	}
	return nodes[0], slotStorage, nil
}

// candidates lists the nodes a clone may go to, best first: the template's
// node when the template sits on non-shared storage (Proxmox allows no
// other), else the allowed online nodes with room for the machine, by most
// free memory. It returns them with the storage key
// admission counts.
func (p *Provider) candidates(rs proxmox.ClusterResources, src *proxmox.ClusterResource, spec *providers.ProxmoxSpec, storage string, memMiB int64) ([]string, string, error) {
	allowed := spec.Nodes
	if len(allowed) == 0 {
		allowed = p.cfg.Nodes
	}
	slotStorage := storage
	if !spec.FullClone || slotStorage == "" {
		slotStorage = "template-" + src.Node
	}
	// Proxmox clones to another node only from shared storage, full clone or
	// linked ("can't clone VM to node … (VM uses local storage)").
	linkedLocal := !sharedStorageOf(rs, src)
	type candidate struct {
		name string
		free int64
	}
	var cands []candidate
	for _, r := range rs {
		if r == nil || r.Type != "node" || r.Status != "online" {
			continue
		}
		if len(allowed) > 0 && !slices.Contains(allowed, r.Node) {
			continue
		}
		if linkedLocal && r.Node != src.Node {
			continue
		}
		cands = append(cands, candidate{r.Node, int64(r.MaxMem) - int64(r.Mem)}) //nolint:gosec // node memory fits int64
	}
	if len(cands) == 0 {
		if linkedLocal {
			return nil, "", providers.Transient("NoNodeAvailable", 30*time.Second,
				fmt.Errorf("the template is on local storage, so clones must run on its node %s, which is offline or not in the allowed nodes", src.Node))
		}
		return nil, "", providers.Transient("NoNodeAvailable", 30*time.Second, fmt.Errorf("no allowed Proxmox node is online (allowed: %v)", allowed))
	}
	// Nodes without room for the machine only when none has room: the
	// clone then waits on the best of them.
	if roomy := slices.DeleteFunc(slices.Clone(cands), func(c candidate) bool {
		return memMiB > 0 && c.free < memMiB<<20
	}); len(roomy) > 0 {
		cands = roomy
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.free != b.free {
			if a.free > b.free {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	nodes := make([]string, 0, len(cands))
	for _, c := range cands {
		nodes = append(nodes, c.name)
	}
	return nodes, slotStorage, nil
}

// sharedStorageOf reports whether the template's disks sit on shared storage,
// judged from cluster/resources' storage entries on its node.
func sharedStorageOf(rs proxmox.ClusterResources, src *proxmox.ClusterResource) bool {
	for _, r := range rs {
		if r != nil && r.Type == "storage" && r.Node == src.Node && r.Shared == 1 && strings.Contains(r.Content, "images") {
			return true
		}
	}
	return false
}

var diskSize = regexp.MustCompile(`(?:^|,)size=(\d+)([KMGT]?)`)

func diskName(spec providers.MachineSpec) string {
	if spec.Proxmox != nil && spec.Proxmox.Disk != "" {
		return spec.Proxmox.Disk
	}
	return "scsi0"
}

// needsResize reports whether the disk is smaller than asked; Proxmox never shrinks.
func (p *Provider) needsResize(vm *proxmox.VirtualMachine, spec providers.MachineSpec) bool {
	if spec.DiskGiB <= 0 || vm.VirtualMachineConfig == nil {
		return false
	}
	disks := vm.VirtualMachineConfig.MergeDisks()
	cur, ok := disks[diskName(spec)]
	if !ok {
		return false
	}
	return sizeGiB(cur) < spec.DiskGiB
}

func sizeGiB(disk string) int64 {
	m := diskSize.FindStringSubmatch(disk)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	switch m[2] {
	case "T":
		return n << 10
	case "G", "":
		if m[2] == "" {
			return n >> 30
		}
		return n
	case "M":
		return n >> 10
	}
	return 0
}
