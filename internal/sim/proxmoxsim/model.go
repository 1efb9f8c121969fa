package proxmoxsim

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// VM is a deep-copied snapshot of one simulated VM, for tests to assert on.
type VM struct {
	// VMID is the VM's cluster-wide ID.
	VMID int
	// Node is the node the VM lives on.
	Node string
	// Name is the config's name (empty while a clone is still running).
	Name string
	// Status is "running" or "stopped".
	Status string
	// Template is true for templates (config template=1).
	Template bool
	// Lock is the config lock ("clone", "create", "destroyed", ...) or empty.
	Lock string
	// Tags are the config's tags in stored order.
	Tags []string
	// Description is the config's description (notes).
	Description string
	// Pool is the resource pool the VM was added to, if any.
	Pool string
	// Config is a copy of the VM's whole configuration, values as stored.
	Config map[string]string
	// IP is the IPv4 address the guest agent reports; empty until the guest
	// has booted and while it is stopped.
	IP string
	// AgentRunning reports whether the guest agent answers.
	AgentRunning bool
}

// TaskInfo is a snapshot of one Proxmox task, for tests to assert on.
type TaskInfo struct {
	// UPID is the task's unique ID.
	UPID string
	// Node is the node the task ran on.
	Node string
	// Type is the worker type: qmclone, qmstart, qmdestroy, ...
	Type string
	// ID is the task's object ID (usually a VMID), possibly empty.
	ID string
	// User is the user or token that started the task.
	User string
	// Running is true until the task finishes.
	Running bool
	// ExitStatus is "OK" or the error text once finished.
	ExitStatus string
	// Start and End are the task's start and end times (End is zero while running).
	Start, End time.Time
}

type nodeState struct {
	cfg    Node
	online bool
	id     int
	since  time.Time
	ip     string
}

type fileVol struct {
	content string // iso, vztmpl, snippets, backup, import
	volname string // e.g. "iso/foo.iso"
	size    int64
	ctime   int64
	format  string
	notes   string
	// data is an uploaded ISO's content when it is small (a cloud-init
	// seed), so a booting guest can read it; larger uploads are only counted.
	data []byte
}

// maxKeptUpload is the largest upload whose content the simulator keeps.
const maxKeptUpload = 1 << 20

// storageInst is one storage as one node sees it (or the single instance of
// a shared storage).
type storageInst struct {
	cfg   *Storage
	node  string // "" for shared storage
	files map[string]*fileVol
}

func newStorageInst(st *Storage, node string) *storageInst {
	return &storageInst{cfg: st, node: node, files: map[string]*fileVol{}}
}

func storeKey(node, name string) string {
	return node + "/" + name
}

func storageOnNode(st *Storage, node string) bool {
	return len(st.Nodes) == 0 || slices.Contains(st.Nodes, node)
}

func (st *Storage) hasContent(c string) bool { return slices.Contains(st.Content, c) }

// storage finds the storage called name as node sees it.
func (s *Server) storage(node, name string) *storageInst {
	for i := range s.opts.Storages {
		st := &s.opts.Storages[i]
		if st.Name != name || !storageOnNode(st, node) {
			continue
		}
		if st.Shared {
			return s.stores[storeKey("", name)]
		}
		return s.stores[storeKey(node, name)]
	}
	return nil
}

// nodeStorages lists the storages node sees, in configuration order.
func (s *Server) nodeStorages(node string) []*storageInst {
	var out []*storageInst
	for i := range s.opts.Storages {
		if si := s.storage(node, s.opts.Storages[i].Name); si != nil {
			out = append(out, si)
		}
	}
	return out
}

// lockKey names a storage lock: per node for local storage, cluster-wide for shared.
func (si *storageInst) lockKey() string {
	return storeKey(si.node, si.cfg.Name)
}

func (si *storageInst) lockError() string {
	if si.cfg.Shared {
		return fmt.Sprintf("cfs-lock 'storage-%s' error: got lock request timeout", si.cfg.Name)
	}
	return fmt.Sprintf("can't lock file '/var/lock/pve-manager/pve-storage-%s' - got timeout", si.cfg.Name)
}

type vmState struct {
	vmid      int
	node      string
	status    string // running | stopped
	config    map[string]string
	pool      string
	ip        string // allocated once, reported by the agent after boot
	agentUp   bool
	bootGen   int
	startedAt time.Time
	pid       int
	// seed is what the guest read from its CD-ROM when it last booted, as
	// cloud-init's NoCloud datasource does (SeedAtBoot).
	seed []byte
}

func (vm *vmState) lock() string     { return vm.config["lock"] }
func (vm *vmState) isTemplate() bool { return vm.config["template"] == "1" }
func (vm *vmState) running() bool    { return vm.status == "running" }
func (vm *vmState) displayName() string {
	if n := vm.config["name"]; n != "" {
		return n
	}
	return fmt.Sprintf("VM %d", vm.vmid)
}

func (vm *vmState) snapshot() VM {
	out := VM{
		VMID:         vm.vmid,
		Node:         vm.node,
		Name:         vm.config["name"],
		Status:       vm.status,
		Template:     vm.isTemplate(),
		Lock:         vm.lock(),
		Tags:         splitTags(vm.config["tags"]),
		Description:  vm.config["description"],
		Pool:         vm.pool,
		Config:       maps.Clone(vm.config),
		AgentRunning: vm.agentUp && vm.running(),
	}
	if out.AgentRunning {
		out.IP, _ = guestIPv4(vm)
	}
	return out
}

// stopGuest marks vm stopped and invalidates any pending boot.
func (vm *vmState) stopGuest() {
	vm.status = "stopped"
	vm.agentUp = false
	vm.bootGen++
	vm.pid = 0
}

// allocIP hands out unique 10.x.y.z addresses (never .0 or .255 in the last octet).
func (s *Server) allocIP() string {
	k := s.ipCounter
	s.ipCounter++
	d := k%254 + 1
	c := (k / 254) % 256
	b := (k/254/256)%255 + 1
	return fmt.Sprintf("10.%d.%d.%d", b, c, d)
}

// newMAC returns a unique MAC in Proxmox's BC:24:11 range.
func (s *Server) newMAC() string {
	s.macSeq++
	v := s.macSeq*2654435761 ^ 0x5a5a5a // spread the sequence, stays unique (odd multiplier)
	return fmt.Sprintf("BC:24:11:%02X:%02X:%02X", v>>16&0xff, v>>8&0xff, v&0xff)
}

func (s *Server) nextProcessID() int {
	s.nextPID++
	return s.nextPID
}

// ---------------------------------------------------------------------------
// setup and inspection API

// defaultVMConfig is the configuration a planted VM or template gets unless
// the caller overrides keys.
func (s *Server) defaultVMConfig(vmid int, name string, template bool) map[string]string {
	disk := fmt.Sprintf("local-lvm:vm-%d-disk-0,discard=on,iothread=1,size=32G", vmid)
	if template {
		disk = fmt.Sprintf("local-lvm:base-%d-disk-0,discard=on,iothread=1,size=32G", vmid)
	}
	cfg := map[string]string{
		"name":    name,
		"agent":   "1",
		"boot":    "order=scsi0;net0",
		"cores":   "2",
		"sockets": "1",
		"cpu":     "x86-64-v2-AES",
		"memory":  "2048",
		"net0":    fmt.Sprintf("virtio=%s,bridge=vmbr0", s.newMAC()),
		"ostype":  "l26",
		"scsi0":   disk,
		"scsihw":  "virtio-scsi-single",
		"smbios1": "uuid=" + simkit.RandomUUID(),
		"vmgenid": simkit.RandomUUID(),
		"meta":    fmt.Sprintf("creation-qemu=8.1.5,ctime=%d", time.Now().Unix()),
	}
	if template {
		cfg["template"] = "1"
	}
	return cfg
}

// AddTemplate plants a template VM (template=1) on node, the source the
// operator clones from. cfg overrides or extends the defaults (scsi0 on
// local-lvm with 32G, net0 virtio on vmbr0, agent=1, 2 cores, 2048 MiB); an
// empty value removes a default key. It panics on an unknown node or a
// VMID already in use, since that is a mistake in the test itself.
func (s *Server) AddTemplate(node string, vmid int, name string, cfg map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustPlant(node, vmid)
	c := s.defaultVMConfig(vmid, name, true)
	for k, v := range cfg {
		if v == "" {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	if t := c["tags"]; t != "" {
		c["tags"] = s.normalizeTags(t)
	}
	c["template"] = "1"
	s.vms[vmid] = &vmState{vmid: vmid, node: node, status: "stopped", config: c, ip: s.allocIP()}
}

// AddVM plants an ordinary VM on node, for example an orphan the operator
// must find or a foreign VM it must leave alone. A running VM's guest agent
// answers at once. It panics on an unknown node or a VMID in use.
func (s *Server) AddVM(node string, vmid int, name string, tags []string, running bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustPlant(node, vmid)
	c := s.defaultVMConfig(vmid, name, false)
	if len(tags) > 0 {
		c["tags"] = s.normalizeTags(joinTags(tags))
	}
	vm := &vmState{vmid: vmid, node: node, status: "stopped", config: c, ip: s.allocIP()}
	if running {
		vm.status = "running"
		vm.agentUp = true
		vm.startedAt = time.Now()
		vm.pid = s.nextProcessID()
	}
	s.vms[vmid] = vm
}

func (s *Server) mustPlant(node string, vmid int) {
	if _, ok := s.nodes[node]; !ok {
		panic(fmt.Sprintf("proxmoxsim: unknown node %q", node))
	}
	if vmid < 100 {
		panic(fmt.Sprintf("proxmoxsim: VMID %d is below 100", vmid))
	}
	if _, ok := s.vms[vmid]; ok {
		panic(fmt.Sprintf("proxmoxsim: VMID %d already exists", vmid))
	}
}

// AddVolume plants a file volume (an ISO, a container template, a snippet,
// a backup) on a storage as node sees it, e.g. AddVolume("pve1", "local",
// "iso", "ubuntu.iso", 2<<30). It panics on an unknown storage.
func (s *Server) AddVolume(node, storage, content, filename string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	si := s.storage(node, storage)
	if si == nil {
		panic(fmt.Sprintf("proxmoxsim: storage %q not on node %q", storage, node))
	}
	si.addFile(content, filename, size)
}

// Volumes returns, sorted, the names of the file volumes of one content
// type ("iso") on a storage as node sees it; nil for an unknown storage.
func (s *Server) Volumes(node, storage, content string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	si := s.storage(node, storage)
	if si == nil {
		return nil
	}
	var out []string
	for _, f := range si.files {
		if f.content == content {
			out = append(out, strings.TrimPrefix(f.volname, content+"/"))
		}
	}
	slices.Sort(out)
	return out
}

func (si *storageInst) addFile(content, filename string, size int64) *fileVol {
	volname := content + "/" + filename
	format := content
	switch content {
	case "iso":
		format = "iso"
	case "vztmpl":
		format = "tgz"
	case "snippets":
		format = "snippet"
	case "backup":
		format = "vma.zst"
	case "import":
		format = strings.TrimPrefix(fileExt(filename), ".")
	}
	f := &fileVol{content: content, volname: volname, size: size, ctime: time.Now().Unix(), format: format}
	si.files[volname] = f
	return f
}

func fileExt(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return strings.ToLower(name[i:])
	}
	return ""
}

// VMs returns a deep-copied snapshot of all VMs, ordered by VMID.
func (s *Server) VMs() []VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := sortedVMIDs(s.vms)
	out := make([]VM, 0, len(ids))
	for _, id := range ids {
		out = append(out, s.vms[id].snapshot())
	}
	return out
}

// VM returns a deep-copied snapshot of one VM and whether it exists.
func (s *Server) VM(vmid int) (VM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ok := s.vms[vmid]
	if !ok {
		return VM{}, false
	}
	return vm.snapshot(), true
}

// SeedAtBoot is what the VM's guest read from its CD-ROM when it last
// booted — the uploaded ISO's bytes, as cloud-init's NoCloud datasource reads
// them before the guest agent starts — and whether there was one. It stays
// what the guest read even after the ISO is ejected or deleted.
func (s *Server) SeedAtBoot(vmid int) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, ok := s.vms[vmid]
	if !ok || vm.seed == nil {
		return nil, false
	}
	return append([]byte(nil), vm.seed...), true
}

// readSeed returns the content of the ISO in vm's CD-ROM drives, if the
// simulator kept it. The caller holds s.mu.
func (s *Server) readSeed(vm *vmState) []byte {
	for _, k := range sortedKeys(vm.config) {
		if !isDriveKey(k) {
			continue
		}
		d := parseDrive(vm.config[k])
		sid, vol, ok := strings.Cut(d.file, ":")
		if !d.isCDROM() || !ok || !strings.HasPrefix(vol, "iso/") {
			continue
		}
		if si := s.storage(vm.node, sid); si != nil {
			if f := si.files[vol]; f != nil && f.data != nil {
				return f.data
			}
		}
	}
	return nil
}

// GuestShutdown powers a running VM off from inside, as an ephemeral runner
// does when its job is done; no task is involved. Stopped or unknown VMs are
// left alone.
func (s *Server) GuestShutdown(vmid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if vm, ok := s.vms[vmid]; ok && vm.running() {
		vm.stopGuest()
	}
}

// SetNodeOnline takes a node off the cluster (its API paths answer 595 like
// pveproxy's failed proxying, listings show it offline and its VMs "unknown")
// or brings it back. It panics on an unknown node.
func (s *Server) SetNodeOnline(node string, online bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[node]
	if !ok {
		panic(fmt.Sprintf("proxmoxsim: unknown node %q", node))
	}
	if online && !n.online {
		n.since = time.Now()
	}
	n.online = online
}

// SetLatencies changes the simulated timing from now on (tasks already
// scheduled keep theirs). A zero Latencies value restores DefaultLatencies.
func (s *Server) SetLatencies(l Latencies) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l == (Latencies{}) {
		l = DefaultLatencies()
	}
	s.lat = l
}

// Tasks returns a snapshot of all tasks in start order.
func (s *Server) Tasks() []TaskInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TaskInfo, 0, len(s.taskOrder))
	for _, u := range s.taskOrder {
		if t, ok := s.tasks[u]; ok {
			out = append(out, t.info())
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// tags

// splitTags parses a Proxmox tag list (separated by ';', ',' or spaces).
func splitTags(s string) []string {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
	if len(f) == 0 {
		return nil
	}
	return f
}

// normalizeTags rewrites a tag list the way Proxmox does on every config
// write (pve-guest-common PVE::GuestHelpers::get_unique_tags, called by
// qemu-server's PVE::API2::Qemu update_vm and create_vm): lower case unless
// the datacenter's tag-style is case-sensitive, duplicates dropped
// (ignoring case unless case-sensitive), sorted unless tag-style's ordering
// is "config", which keeps the order written; ";" separated.
func (s *Server) normalizeTags(v string) string {
	tags := splitTags(v)
	caseSensitive := s.opts.TagCaseSensitive
	key := func(t string) string {
		if caseSensitive {
			return t
		}
		return strings.ToLower(t)
	}
	if s.opts.TagOrdering != TagOrderingConfig {
		sort.SliceStable(tags, func(i, j int) bool { return key(tags[i]) < key(tags[j]) })
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		t = key(t)
		if seen[t] {
			continue
		}
		seen[t] = true
		out = append(out, t)
	}
	return strings.Join(out, ";")
}

// trimDescription drops trailing whitespace, as Proxmox does when it reads
// a config back (qemu-server PVE::QemuServer parse_vm_config: the
// description's trailing whitespace is stripped), so what a client wrote
// with a final newline reads back without it.
func trimDescription(v string) string {
	return strings.TrimRightFunc(v, unicode.IsSpace)
}

// joinTags joins tags the way Proxmox stores them, without duplicates.
func joinTags(tags []string) string {
	seen := map[string]bool{}
	var out []string
	for _, t := range tags {
		for _, p := range splitTags(t) {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return strings.Join(out, ";")
}

// ---------------------------------------------------------------------------
// sizes and drives

// parseSize parses Proxmox sizes like "32G", "512M", "1.5T" or a byte count.
func parseSize(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	mult := float64(1)
	switch s[len(s)-1] {
	case 'K', 'k':
		mult = 1 << 10
	case 'M', 'm':
		mult = 1 << 20
	case 'G', 'g':
		mult = 1 << 30
	case 'T', 't':
		mult = 1 << 40
	}
	num := s
	if mult != 1 {
		num = s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return int64(f * mult), true
}

// formatSize prints a byte count as Proxmox writes it into drive strings.
func formatSize(b int64) string {
	switch {
	case b > 0 && b%(1<<40) == 0:
		return fmt.Sprintf("%dT", b>>40)
	case b > 0 && b%(1<<30) == 0:
		return fmt.Sprintf("%dG", b>>30)
	case b > 0 && b%(1<<20) == 0:
		return fmt.Sprintf("%dM", b>>20)
	case b > 0 && b%(1<<10) == 0:
		return fmt.Sprintf("%dK", b>>10)
	}
	return strconv.FormatInt(b, 10)
}

// drive is a parsed disk option such as "local-lvm:vm-100-disk-0,size=32G".
type drive struct {
	file string   // volume ID, "none", "cdrom" or a path
	opts []string // the remaining key=value options, in order
}

func parseDrive(v string) drive {
	parts := strings.Split(v, ",")
	d := drive{}
	for i, p := range parts {
		if i == 0 && !strings.Contains(p, "=") {
			d.file = p
			continue
		}
		if strings.HasPrefix(p, "file=") {
			d.file = strings.TrimPrefix(p, "file=")
			continue
		}
		d.opts = append(d.opts, p)
	}
	return d
}

func (d drive) String() string {
	return strings.Join(append([]string{d.file}, d.opts...), ",")
}

func (d drive) opt(key string) string {
	for _, o := range d.opts {
		if k, v, ok := strings.Cut(o, "="); ok && k == key {
			return v
		}
	}
	return ""
}

func (d *drive) setOpt(key, val string) {
	for i, o := range d.opts {
		if k, _, ok := strings.Cut(o, "="); ok && k == key {
			d.opts[i] = key + "=" + val
			return
		}
	}
	d.opts = append(d.opts, key+"="+val)
}

func (d drive) isCDROM() bool { return d.opt("media") == "cdrom" }

// isCloudInit: Proxmox's own generated cloud-init drive (vm-<vmid>-cloudinit),
// not an uploaded ISO whose name happens to say cloudinit (iso/...), which
// storage may delete while a VM still names it, as Proxmox does.
func (d drive) isCloudInit() bool {
	_, vol, _ := strings.Cut(d.file, ":")
	return !strings.HasPrefix(vol, "iso/") && strings.Contains(vol, "cloudinit")
}

func (d drive) storageID() string {
	sid, _, ok := strings.Cut(d.file, ":")
	if !ok {
		return ""
	}
	return sid
}

func (d drive) size() int64 {
	n, _ := parseSize(d.opt("size"))
	return n
}

// isDriveKey reports whether a config key is a disk slot.
func isDriveKey(k string) bool {
	if k == "efidisk0" || k == "tpmstate0" {
		return true
	}
	for _, p := range []string{"ide", "sata", "scsi", "virtio"} {
		if rest, ok := strings.CutPrefix(k, p); ok && rest != "" && isDigits(rest) {
			return true
		}
	}
	return false
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// sortedKeys returns m's keys in a stable order (drive keys by slot).
func sortedKeys(m map[string]string) []string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	return keys
}

// vmDisks lists the VM's disk volumes (not CD-ROMs) in slot order.
func vmDisks(cfg map[string]string) []struct {
	key string
	d   drive
} {
	var out []struct {
		key string
		d   drive
	}
	for _, k := range sortedKeys(cfg) {
		if !isDriveKey(k) {
			continue
		}
		d := parseDrive(cfg[k])
		if d.isCDROM() || d.file == "" || d.file == "none" {
			continue
		}
		out = append(out, struct {
			key string
			d   drive
		}{k, d})
	}
	return out
}

// bootDisk is the first disk in the boot order, or the first disk at all.
func bootDiskSize(cfg map[string]string) int64 {
	disks := vmDisks(cfg)
	if order, ok := strings.CutPrefix(cfg["boot"], "order="); ok {
		for _, dev := range strings.Split(order, ";") {
			for _, d := range disks {
				if d.key == dev {
					return d.d.size()
				}
			}
		}
	}
	if len(disks) > 0 {
		return disks[0].d.size()
	}
	return 0
}

// memoryMiB reads the memory option ("2048" or "current=2048,...").
func memoryMiB(cfg map[string]string) int64 {
	v := cfg["memory"]
	if v == "" {
		return 512
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	for _, p := range strings.Split(v, ",") {
		if k, val, ok := strings.Cut(p, "="); ok && k == "current" {
			if n, err := strconv.ParseInt(val, 10, 64); err == nil {
				return n
			}
		}
	}
	return 512
}

func cpuCount(cfg map[string]string) int {
	if v, err := strconv.Atoi(cfg["vcpus"]); err == nil && v > 0 {
		return v
	}
	cores, err := strconv.Atoi(cfg["cores"])
	if err != nil || cores <= 0 {
		cores = 1
	}
	sockets, err := strconv.Atoi(cfg["sockets"])
	if err != nil || sockets <= 0 {
		sockets = 1
	}
	return cores * sockets
}

// agentEnabled parses the agent option ("1", "enabled=1,fstrim_cloned_disks=1", ...).
func agentEnabled(cfg map[string]string) bool {
	v := cfg["agent"]
	if v == "" {
		return false
	}
	for i, p := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(p, "=")
		if !ok && i == 0 {
			return truthy(k)
		}
		if ok && k == "enabled" {
			return truthy(val)
		}
	}
	return false
}

func truthy(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// netMAC extracts the MAC of a net option like "virtio=BC:24:11:..,bridge=vmbr0".
func netMAC(v string) string {
	for _, p := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		switch k {
		case "virtio", "e1000", "e1000e", "rtl8139", "vmxnet3", "macaddr", "i82551", "i82557b", "i82559er", "ne2k_isa", "ne2k_pci", "pcnet":
			return val
		}
	}
	return ""
}

// netWithMAC sets (or adds) the MAC address of a net option.
func netWithMAC(v, mac string) string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		if i == 0 && !ok && isNICModel(k) {
			parts[0] = k + "=" + mac
			return strings.Join(parts, ",")
		}
		if ok && (isNICModel(k) || k == "macaddr") {
			parts[i] = k + "=" + mac
			return strings.Join(parts, ",")
		}
	}
	return v
}

func isNICModel(k string) bool {
	switch k {
	case "virtio", "e1000", "e1000e", "rtl8139", "vmxnet3", "i82551", "i82557b", "i82559er", "ne2k_isa", "ne2k_pci", "pcnet":
		return true
	}
	return false
}
