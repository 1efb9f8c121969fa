package proxmoxsim

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// lookupVM finds the VM of the request's {vmid} on its {node}, answering
// like Proxmox when the config file is not on that node. The caller must
// hold s.mu.
func (s *Server) lookupVM(rc *reqCtx) (*vmState, *apiError) {
	vmid, aerr := vmidVar(rc)
	if aerr != nil {
		return nil, aerr
	}
	node := rc.vars["node"]
	vm, ok := s.vms[vmid]
	if !ok || vm.node != node {
		return nil, missingConfig(node, vmid)
	}
	return vm, nil
}

func missingConfig(node string, vmid int) *apiError {
	return failf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
}

// alive reports whether vm is still the VM registered under its VMID (it
// may have been destroyed and the ID reused while a task ran).
func (s *Server) alive(vm *vmState) bool {
	cur, ok := s.vms[vm.vmid]
	return ok && cur == vm
}

// vmStatusJSON renders a VM as /nodes/{node}/qemu lists it, or, with
// current, as .../status/current returns it.
func (s *Server) vmStatusJSON(vm *vmState, current bool) map[string]any {
	maxmem := uint64(memoryMiB(vm.config)) << 20 //nolint:gosec // memory is positive
	m := map[string]any{
		"vmid":      vm.vmid,
		"name":      vm.displayName(),
		"status":    vm.status,
		"cpus":      cpuCount(vm.config),
		"maxmem":    maxmem,
		"maxdisk":   bootDiskSize(vm.config),
		"mem":       0,
		"cpu":       0,
		"disk":      0,
		"netin":     0,
		"netout":    0,
		"diskread":  0,
		"diskwrite": 0,
		"uptime":    0,
	}
	if t := vm.config["tags"]; t != "" {
		m["tags"] = t
	}
	if l := vm.lock(); l != "" {
		m["lock"] = l
	}
	if vm.isTemplate() {
		m["template"] = 1
	}
	if vm.running() {
		m["pid"] = vm.pid
		m["mem"] = maxmem / 3
		m["cpu"] = 0.02
		m["uptime"] = int64(time.Since(vm.startedAt).Seconds())
		m["netin"] = 123456
		m["netout"] = 65432
	}
	if current {
		m["qmpstatus"] = vm.status
		m["ha"] = map[string]any{"managed": 0}
		if agentEnabled(vm.config) {
			m["agent"] = 1
		}
		if vm.running() {
			m["running-machine"] = "pc-i440fx-8.1+pve0"
			m["running-qemu"] = "8.1.5"
		}
	}
	return m
}

func (s *Server) handleListVMs(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	node := rc.vars["node"]
	out := []map[string]any{}
	for _, id := range sortedVMIDs(s.vms) {
		if vm := s.vms[id]; vm.node == node {
			out = append(out, s.vmStatusJSON(vm, false))
		}
	}
	return out, nil
}

func sortedVMIDs(vms map[int]*vmState) []int {
	ids := make([]int, 0, len(vms))
	for id := range vms {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

func (s *Server) handleVMIndex(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, aerr := s.lookupVM(rc); aerr != nil {
		return nil, aerr
	}
	var out []map[string]string
	for _, d := range []string{"config", "pending", "status", "agent", "clone", "resize", "template", "firewall", "rrd", "rrddata", "snapshot"} {
		out = append(out, map[string]string{"subdir": d})
	}
	return out, nil
}

func (s *Server) handleVMStatus(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	return s.vmStatusJSON(vm, true), nil
}

func (s *Server) handleConfigGet(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	if snap := rc.params["snapshot"]; snap != "" {
		return nil, failf("snapshot '%s' does not exist", snap)
	}
	return configJSON(vm.config), nil
}

// allocDisks replaces Proxmox's new-disk syntax in drive values
// ("local-lvm:32" for a 32 GiB disk, "local-lvm:cloudinit") with allocated
// volumes, as create_disks does. The caller must hold s.mu.
func (s *Server) allocDisks(node string, vmid int, cur, set map[string]string, defStorage string) *apiError {
	taken := func(name string) bool {
		for _, m := range []map[string]string{cur, set} {
			for _, v := range m {
				if strings.Contains(v, name+",") || strings.Contains(v, name+".") || strings.HasSuffix(v, name) {
					return true
				}
			}
		}
		return false
	}
	for _, k := range sortedKeys(set) {
		if !isDriveKey(k) {
			continue
		}
		d := parseDrive(set[k])
		sid, vol, hasSid := strings.Cut(d.file, ":")
		if !hasSid {
			sid, vol = defStorage, d.file
		}
		isCI := vol == "cloudinit"
		gb, err := strconv.ParseFloat(vol, 64)
		isNew := err == nil && !d.isCDROM()
		if !isCI && !isNew {
			continue
		}
		if sid == "" {
			return failf("no storage ID specified (and no default storage)")
		}
		si := s.storage(node, sid)
		if si == nil {
			return failf("storage '%s' does not exist", sid)
		}
		fileBased := isFileStorage(si.cfg.Type)
		if isCI {
			if fileBased {
				d.file = fmt.Sprintf("%s:%d/vm-%d-cloudinit.qcow2", sid, vmid, vmid)
			} else {
				d.file = fmt.Sprintf("%s:vm-%d-cloudinit", sid, vmid)
			}
			d.setOpt("media", "cdrom")
			set[k] = d.String()
			continue
		}
		if !si.cfg.hasContent("images") {
			return paramErr("storage", fmt.Sprintf("storage '%s' does not support vm images", sid))
		}
		nm := ""
		for i := 0; ; i++ {
			nm = fmt.Sprintf("vm-%d-disk-%d", vmid, i)
			if !taken(nm) {
				break
			}
		}
		if fileBased {
			d.file = fmt.Sprintf("%s:%d/%s.qcow2", sid, vmid, nm)
		} else {
			d.file = sid + ":" + nm
		}
		d.setOpt("size", formatSize(int64(gb*float64(1<<30))))
		set[k] = d.String()
	}
	return nil
}

// prepareConfig turns validated values into what Proxmox stores: NICs get
// a MAC (kept from the current config when there is one).
func (s *Server) prepareConfig(cur map[string]string, set map[string]string) {
	for k, v := range set {
		if indexedKeyOf(k) != "net" || netMAC(v) != "" {
			continue
		}
		mac := netMAC(cur[k])
		if mac == "" {
			mac = s.newMAC()
		}
		set[k] = netWithMAC(v, mac)
	}
}

// applyConfig applies a validated update to cfg, the way Proxmox does for a
// stopped VM. It returns an error text for an invalid boot order.
func applyConfig(cfg map[string]string, set map[string]string, del []string, force bool) string {
	next := maps.Clone(cfg)
	for _, k := range del {
		old, ok := next[k]
		if !ok {
			continue
		}
		delete(next, k)
		if isDriveKey(k) && !force {
			d := parseDrive(old)
			if !d.isCDROM() && d.storageID() != "" {
				for i := 0; i <= 255; i++ {
					u := "unused" + strconv.Itoa(i)
					if _, used := next[u]; !used {
						next[u] = d.file
						break
					}
				}
			}
		}
	}
	for k, v := range set {
		next[k] = v
	}
	if order, ok := strings.CutPrefix(next["boot"], "order="); ok {
		for _, dev := range strings.Split(order, ";") {
			if dev == "" {
				continue
			}
			if _, exists := next[dev]; !exists {
				return fmt.Sprintf("invalid bootorder: device '%s' does not exist'", dev)
			}
		}
	}
	clear(cfg)
	maps.Copy(cfg, next)
	return ""
}

func describeUpdate(set map[string]string, del []string) string {
	var b strings.Builder
	for _, k := range sortedKeys(set) {
		fmt.Fprintf(&b, " -%s '%s'", k, set[k])
	}
	if len(del) > 0 {
		fmt.Fprintf(&b, " -delete %s", strings.Join(del, ","))
	}
	return b.String()
}

// handleConfigSet implements POST (asynchronous, returns a qmconfig UPID)
// and PUT (synchronous, returns null) of .../config.
func (s *Server) handleConfigSet(rc *reqCtx) (any, *apiError) {
	set, del, aerr := validateConfig(rc.params)
	if aerr != nil {
		return nil, aerr
	}
	if t, ok := set["tags"]; ok {
		set["tags"] = s.normalizeTags(t)
	}
	if len(set) == 0 && len(del) == 0 && rc.params["revert"] == "" {
		return nil, failf("no options specified")
	}
	sync := rc.method == http.MethodPut
	if sync {
		s.mu.Lock()
		d := s.lat.Config
		s.mu.Unlock()
		if !s.kit.Sleep(rc.r.Context(), d) {
			return nil, failf("interrupted")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	if dg := rc.params["digest"]; dg != "" && dg != configDigest(vm.config) {
		return nil, failf("detected modified configuration - file changed by other user? Try again.")
	}
	if l := vm.lock(); l != "" && !truthy(rc.params["skiplock"]) {
		return nil, failf("VM is locked (%s)", l)
	}
	if aerr := s.allocDisks(vm.node, vm.vmid, vm.config, set, ""); aerr != nil {
		return nil, aerr
	}
	s.prepareConfig(vm.config, set)
	force := truthy(rc.params["force"])
	if sync {
		if msg := applyConfig(vm.config, set, del, force); msg != "" {
			return nil, failf("%s", msg)
		}
		return nil, nil
	}
	t := s.newTask(vm.node, "qmconfig", strconv.Itoa(vm.vmid), rc.user)
	t.logf("update VM %d:%s", vm.vmid, describeUpdate(set, del))
	s.runTask(t, s.lat.Config, rc.taskFault, func(injected string) string {
		if !s.alive(vm) {
			return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", vm.node, vm.vmid)
		}
		if injected != "" {
			return injected
		}
		return applyConfig(vm.config, set, del, force)
	})
	return t.upid, nil
}

// ---------------------------------------------------------------------------
// clone

// isBaseVolume reports whether a volume is a template's base image, the only
// kind Proxmox can link-clone.
func isBaseVolume(volid string) bool {
	_, vol, ok := strings.Cut(volid, ":")
	if !ok {
		return false
	}
	return strings.HasPrefix(path.Base(vol), "base-")
}

// cloneConfig builds the new VM's config the way qm clone does: new MACs,
// new SMBIOS UUID and vmgenid, renamed disks, no template flag.
func (s *Server) cloneConfig(src *vmState, newid int, full bool, storage, format, name, desc string) (map[string]string, []string) {
	out := map[string]string{}
	var log []string
	diskIdx := 0
	for _, k := range sortedKeys(src.config) {
		v := src.config[k]
		switch {
		case k == "template" || k == "lock" || k == "parent" || k == "snaptime" || k == "vmstate" || k == "snapstate":
			continue
		case indexedKeyOf(k) == "unused":
			continue
		case indexedKeyOf(k) == "net":
			out[k] = netWithMAC(v, s.newMAC())
		case isDriveKey(k):
			d := parseDrive(v)
			if (d.isCDROM() && !d.isCloudInit()) || d.storageID() == "" {
				out[k] = v
				continue
			}
			sid := d.storageID()
			tsid := sid
			if full && storage != "" {
				tsid = storage
			}
			fileBased := false
			if si := s.storage(src.node, tsid); si != nil {
				fileBased = isFileStorage(si.cfg.Type)
			}
			_, vol, _ := strings.Cut(d.file, ":")
			switch {
			case d.isCloudInit():
				if fileBased {
					d.file = fmt.Sprintf("%s:%d/vm-%d-cloudinit.qcow2", tsid, newid, newid)
				} else {
					d.file = fmt.Sprintf("%s:vm-%d-cloudinit", tsid, newid)
				}
			case full:
				nm := fmt.Sprintf("vm-%d-disk-%d", newid, diskIdx)
				diskIdx++
				if fileBased {
					f := format
					if f == "" {
						f = "qcow2"
					}
					d.file = fmt.Sprintf("%s:%d/%s.%s", tsid, newid, nm, f)
				} else {
					d.file = tsid + ":" + nm
				}
				log = append(log, fmt.Sprintf("create full clone of drive %s (%s)", k, parseDrive(v).file))
			default:
				nm := fmt.Sprintf("vm-%d-disk-%d", newid, diskIdx)
				diskIdx++
				if fileBased {
					d.file = fmt.Sprintf("%s:%s/%d/%s.qcow2", sid, vol, newid, nm)
				} else {
					d.file = fmt.Sprintf("%s:%s/%s", sid, vol, nm)
				}
				log = append(log, fmt.Sprintf("create linked clone of drive %s (%s)", k, parseDrive(v).file))
			}
			out[k] = d.String()
		default:
			out[k] = v
		}
	}
	smbios := []string{}
	for _, p := range strings.Split(out["smbios1"], ",") {
		if p != "" && !strings.HasPrefix(p, "uuid=") {
			smbios = append(smbios, p)
		}
	}
	out["smbios1"] = strings.Join(append([]string{"uuid=" + simkit.RandomUUID()}, smbios...), ",")
	if _, ok := out["vmgenid"]; ok {
		out["vmgenid"] = simkit.RandomUUID()
	}
	if name != "" {
		out["name"] = name
	} else if old := src.config["name"]; old != "" {
		out["name"] = "Copy-of-VM-" + old
	} else {
		out["name"] = fmt.Sprintf("Copy-of-VM-%d", src.vmid)
	}
	if desc != "" {
		out["description"] = desc
	}
	return out, log
}

// handleClone implements POST .../clone with Proxmox's checks, the
// temporary "lock: clone" config and the storage lock.
func (s *Server) handleClone(rc *reqCtx) (any, *apiError) {
	p := rc.params
	newidStr, ok := p["newid"]
	if !ok {
		return nil, paramErr("newid", "property is missing and it is not optional")
	}
	newid, aerr := parseVMID("newid", newidStr)
	if aerr != nil {
		return nil, aerr
	}
	name := p["name"]
	if name != "" && !dnsNameRE.MatchString(name) {
		return nil, paramErr("name", "invalid format - value does not look like a valid DNS name")
	}
	format := p["format"]
	if format != "" && format != "raw" && format != "qcow2" && format != "vmdk" {
		return nil, paramErr("format", fmt.Sprintf("value '%s' does not have a value in the enumeration 'raw, qcow2, vmdk'", format))
	}
	fullSet := false
	fullVal := false
	if v, ok := p["full"]; ok {
		nv, msg := validateConfigValue("template", v) // same boolean check
		if msg != "" {
			return nil, paramErr("full", msg)
		}
		fullSet, fullVal = true, nv == "1"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	node := rc.vars["node"]
	target := p["target"]
	if target == node || target == "localhost" {
		target = ""
	}
	if target != "" {
		if _, ok := s.nodes[target]; !ok {
			return nil, failf("no such cluster node '%s'", target)
		}
	}
	storage := p["storage"]
	var storeInst *storageInst
	if storage != "" {
		storeInst = s.storage(node, storage)
		if storeInst == nil {
			return nil, failf("storage '%s' does not exist", storage)
		}
		if target != "" {
			if s.storage(target, storage) == nil {
				return nil, failf("storage '%s' is not available on node '%s'", storage, target)
			}
			if !storeInst.cfg.Shared {
				return nil, failf("can't clone to non-shared storage '%s'", storage)
			}
		}
	}
	src, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	if l := src.lock(); l != "" {
		return nil, failf("VM is locked (%s)", l)
	}
	if sn := p["snapname"]; sn != "" {
		return nil, failf("snapshot '%s' does not exist", sn)
	}
	full := !src.isTemplate()
	if fullSet {
		full = fullVal
	}
	if storage != "" && !full {
		return nil, failf("parameter 'storage' not allowed for linked clones")
	}
	if format != "" && !full {
		return nil, failf("parameter 'format' not allowed for linked clones")
	}
	if storeInst != nil && !storeInst.cfg.hasContent("images") {
		return nil, failf("storage '%s' does not support vm images", storage)
	}
	sharedVM := true
	var lockStore *storageInst
	for _, k := range sortedKeys(src.config) {
		if !isDriveKey(k) {
			continue
		}
		d := parseDrive(src.config[k])
		sid := d.storageID()
		if sid == "" {
			continue
		}
		si := s.storage(src.node, sid)
		if si == nil || !si.cfg.Shared {
			sharedVM = false
		}
		if d.isCDROM() {
			continue
		}
		if !full && !d.isCloudInit() && !isBaseVolume(d.file) {
			return nil, failf("Linked clone feature is not supported for drive '%s'", k)
		}
		if lockStore == nil && !d.isCloudInit() {
			lockStore = si
		}
	}
	if storeInst != nil {
		lockStore = storeInst
	}
	if target != "" && !sharedVM {
		return nil, failf("can't clone VM to node '%s' (VM uses local storage)", target)
	}
	if _, exists := s.vms[newid]; exists {
		return nil, failf("unable to create VM %d: config file already exists", newid)
	}

	newconf, diskLog := s.cloneConfig(src, newid, full, storage, format, name, trimDescription(p["description"]))
	pool := p["pool"]
	t := s.newTask(node, "qmclone", strconv.Itoa(src.vmid), rc.user)
	injected := rc.taskFault
	// Proxmox VE checks only that the config does not exist, then forks the
	// worker and answers with its UPID; the worker takes the new VMID's
	// config lock and writes the temporary config. Until then the VMID looks
	// free, and a second clone to it is accepted, its worker failing on the
	// lock (or on the config the first one wrote).
	worker := func() {
		if holder := s.cloneTargets[newid]; holder != nil && holder.running {
			t.finish(fmt.Sprintf("clone failed: can't lock file '/var/lock/qemu-server/lock-%d.conf' - got timeout", newid))
			return
		}
		if _, exists := s.vms[newid]; exists {
			t.finish(fmt.Sprintf("clone failed: unable to create VM %d: config file already exists", newid))
			return
		}
		s.cloneTargets[newid] = t
		t.log = append(t.log, diskLog...)
		s.runClone(t, node, target, newid, newconf, pool, full, lockStore, injected)
	}
	if s.lat.CloneConfigLag <= 0 {
		// No lag: the temporary config exists when the call answers, which
		// tests of the temporary config itself rely on.
		worker()
	} else {
		s.kit.After(s.lat.CloneConfigLag, worker)
	}
	return t.upid, nil
}

// runClone is the qmclone worker once it holds the new VMID's lock: the
// temporary config, the storage lock, the copy, the final config. The caller
// must hold s.mu.
func (s *Server) runClone(t *taskState, node, target string, newid int, newconf map[string]string, pool string, full bool, lockStore *storageInst, injected string) {
	// qm clone first writes a temporary config: "# qmclone temporary file"
	// and "lock: clone"; the comment line reads back as the description.
	placeholder := map[string]string{"lock": "clone", "description": " qmclone temporary file"}
	vm := &vmState{vmid: newid, node: node, status: "stopped", config: placeholder, ip: s.allocIP()}
	s.vms[newid] = vm
	end := func(msg string) {
		if s.cloneTargets[newid] == t {
			delete(s.cloneTargets, newid)
		}
		t.finish(msg)
	}

	total := s.lat.Clone
	hold := s.lat.StorageLock
	if hold <= 0 || hold > total {
		hold = total
	}
	drop := func(msg string) {
		if s.alive(vm) {
			delete(s.vms, newid)
		}
		end(msg)
	}
	if lockStore != nil {
		key := lockStore.lockKey()
		if limit := s.opts.StorageLockLimit; limit > 0 && s.storageLocks[key] >= limit {
			msg := "clone failed: " + lockStore.lockError()
			s.kit.After(hold, func() { drop(msg) })
			return
		}
		s.storageLocks[key]++
		s.kit.After(hold, func() { s.storageLocks[key]-- })
	}
	// Like qm clone, the config holds only the temporary file until the disks are
	// copied; then the full config is written, still locked, and the lock
	// goes when the task ends. A linked clone's disks are ready early.
	written := total * 9 / 10
	if !full {
		written = hold / 2
	}
	s.kit.After(written, func() {
		if s.alive(vm) && vm.config["description"] == placeholder["description"] && vm.lock() == "clone" {
			vm.config = maps.Clone(newconf)
			vm.config["lock"] = "clone"
		}
	})
	s.kit.After(total, func() {
		if !s.alive(vm) {
			end(fmt.Sprintf("clone failed: Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, newid))
			return
		}
		if injected != "" {
			drop(injected)
			return
		}
		t.logf("transferred %s of %s (100.00%%)", formatSize(bootDiskSize(newconf)), formatSize(bootDiskSize(newconf)))
		vm.config = newconf
		if target != "" {
			vm.node = target
		}
		vm.pool = pool
		end("")
	})
}

// ---------------------------------------------------------------------------
// create, resize, template

// handleCreateVM implements POST /nodes/{node}/qemu for plain VM creation:
// new disks given as "storage:sizeGiB" are allocated, NICs get MACs.
func (s *Server) handleCreateVM(rc *reqCtx) (any, *apiError) {
	idStr, ok := rc.params["vmid"]
	if !ok {
		return nil, paramErr("vmid", "property is missing and it is not optional")
	}
	vmid, aerr := parseVMID("vmid", idStr)
	if aerr != nil {
		return nil, aerr
	}
	params := maps.Clone(rc.params)
	if params["archive"] != "" {
		return nil, failf("restore from backup archives is not supported by the simulator")
	}
	defStorage := params["storage"]
	pool := params["pool"]
	for _, k := range []string{"vmid", "storage", "pool", "start", "unique", "archive", "bwlimit", "live-restore"} {
		delete(params, k)
	}
	set, _, aerr := validateConfig(params)
	if aerr != nil {
		return nil, aerr
	}
	if t, ok := set["tags"]; ok {
		set["tags"] = s.normalizeTags(t)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	node := rc.vars["node"]
	if _, exists := s.vms[vmid]; exists {
		return nil, failf("unable to create VM %d: config file already exists", vmid)
	}
	if aerr := s.allocDisks(node, vmid, nil, set, defStorage); aerr != nil {
		return nil, aerr
	}
	s.prepareConfig(nil, set)
	if msg := applyConfig(map[string]string{}, set, nil, false); msg != "" {
		return nil, failf("%s", msg)
	}
	if _, ok := set["smbios1"]; !ok {
		set["smbios1"] = "uuid=" + simkit.RandomUUID()
	}
	if _, ok := set["vmgenid"]; !ok {
		set["vmgenid"] = simkit.RandomUUID()
	}
	vm := &vmState{vmid: vmid, node: node, status: "stopped", config: map[string]string{"lock": "create"}, ip: s.allocIP()}
	s.vms[vmid] = vm
	t := s.newTask(node, "qmcreate", strconv.Itoa(vmid), rc.user)
	s.runTask(t, s.lat.Config, rc.taskFault, func(injected string) string {
		if !s.alive(vm) {
			return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
		}
		if injected != "" {
			delete(s.vms, vmid)
			return injected
		}
		vm.config = set
		vm.pool = pool
		return ""
	})
	return t.upid, nil
}

func (s *Server) handleResize(rc *reqCtx) (any, *apiError) {
	disk, size := rc.params["disk"], rc.params["size"]
	if disk == "" {
		return nil, paramErr("disk", "property is missing and it is not optional")
	}
	if !isDriveKey(disk) {
		return nil, paramErr("disk", fmt.Sprintf("value '%s' does not have a value in the enumeration", disk))
	}
	if size == "" {
		return nil, paramErr("size", "property is missing and it is not optional")
	}
	m := sizeRE.FindStringSubmatch(size)
	if m == nil {
		return nil, paramErr("size", "value does not match the regex pattern")
	}
	delta, _ := parseSize(m[2] + m[3])
	grow := m[1] == "+"

	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	if dg := rc.params["digest"]; dg != "" && dg != configDigest(vm.config) {
		return nil, failf("detected modified configuration - file changed by other user? Try again.")
	}
	t := s.newTask(vm.node, "resize", strconv.Itoa(vm.vmid), rc.user)
	check := func() (drive, int64, string) {
		if l := vm.lock(); l != "" && !truthy(rc.params["skiplock"]) {
			return drive{}, 0, fmt.Sprintf("VM is locked (%s)", l)
		}
		v, ok := vm.config[disk]
		if !ok {
			return drive{}, 0, fmt.Sprintf("disk '%s' does not exist", disk)
		}
		d := parseDrive(v)
		if d.isCDROM() {
			return drive{}, 0, "you can't resize a cdrom"
		}
		old := d.size()
		newSize := delta
		if grow {
			newSize = old + delta
		}
		if newSize < old {
			return drive{}, 0, "shrinking disks is not supported"
		}
		return d, newSize, ""
	}
	if _, _, msg := check(); msg != "" {
		t.finish(msg)
		return t.upid, nil
	}
	s.runTask(t, s.lat.Resize, rc.taskFault, func(injected string) string {
		if !s.alive(vm) {
			return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", vm.node, vm.vmid)
		}
		if injected != "" {
			return injected
		}
		d, newSize, msg := check()
		if msg != "" {
			return msg
		}
		t.logf("Size of logical volume changed to %s.", formatSize(newSize))
		d.setOpt("size", formatSize(newSize))
		vm.config[disk] = d.String()
		return ""
	})
	return t.upid, nil
}

func (s *Server) handleTemplate(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	if vm.isTemplate() {
		return nil, failf("you can't convert a template to a template")
	}
	if vm.running() {
		return nil, failf("you can't convert a VM to template if VM is running")
	}
	if l := vm.lock(); l != "" {
		return nil, failf("VM is locked (%s)", l)
	}
	t := s.newTask(vm.node, "qmtemplate", strconv.Itoa(vm.vmid), rc.user)
	s.runTask(t, s.lat.Config, rc.taskFault, func(injected string) string {
		if !s.alive(vm) {
			return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", vm.node, vm.vmid)
		}
		if injected != "" {
			return injected
		}
		if vm.running() {
			return "you can't convert a VM to template if VM is running"
		}
		for _, d := range vmDisks(vm.config) {
			if d.d.isCloudInit() {
				continue
			}
			sid, vol, _ := strings.Cut(d.d.file, ":")
			dir, base := path.Split(vol)
			base = strings.Replace(base, fmt.Sprintf("vm-%d-disk", vm.vmid), fmt.Sprintf("base-%d-disk", vm.vmid), 1)
			nd := d.d
			nd.file = sid + ":" + dir + base
			vm.config[d.key] = nd.String()
		}
		vm.config["template"] = "1"
		return ""
	})
	return t.upid, nil
}

// ---------------------------------------------------------------------------
// power

func (s *Server) hasCloudInitDrive(vm *vmState) bool {
	for k, v := range vm.config {
		if isDriveKey(k) && parseDrive(v).isCloudInit() {
			return true
		}
	}
	return false
}

// boot marks vm running and lets its guest agent come up after the boot
// latency. The caller must hold s.mu.
func (s *Server) boot(vm *vmState) {
	vm.status = "running"
	vm.startedAt = time.Now()
	vm.pid = s.nextProcessID()
	vm.agentUp = false
	vm.seed = s.readSeed(vm)
	vm.bootGen++
	gen := vm.bootGen
	s.kit.After(s.lat.Boot, func() {
		if s.alive(vm) && vm.running() && vm.bootGen == gen {
			vm.agentUp = true
		}
	})
}

func (s *Server) handleStart(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	skiplock := truthy(rc.params["skiplock"])
	t := s.newTask(vm.node, "qmstart", strconv.Itoa(vm.vmid), rc.user)
	check := func() string {
		switch {
		case vm.isTemplate():
			return "you can't start a vm if it's a template"
		case vm.lock() != "" && !skiplock:
			return fmt.Sprintf("VM is locked (%s)", vm.lock())
		case vm.running():
			return fmt.Sprintf("VM %d already running", vm.vmid)
		}
		return ""
	}
	if msg := check(); msg != "" {
		t.finish(msg)
		return t.upid, nil
	}
	if s.hasCloudInitDrive(vm) {
		t.logf("generating cloud-init ISO")
	}
	s.runTask(t, s.lat.Start, rc.taskFault, func(injected string) string {
		if !s.alive(vm) {
			return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", vm.node, vm.vmid)
		}
		if injected != "" {
			return injected
		}
		if msg := check(); msg != "" {
			return msg
		}
		s.boot(vm)
		return ""
	})
	return t.upid, nil
}

// powerOff implements shutdown and stop: a stopped VM is already done.
func (s *Server) powerOff(rc *reqCtx, typ string, d time.Duration) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	skiplock := truthy(rc.params["skiplock"])
	t := s.newTask(vm.node, typ, strconv.Itoa(vm.vmid), rc.user)
	if l := vm.lock(); l != "" && !skiplock {
		t.finish(fmt.Sprintf("VM is locked (%s)", l))
		return t.upid, nil
	}
	if !vm.running() {
		t.logf("VM %d not running", vm.vmid)
		d = 0
	}
	s.runTask(t, d, rc.taskFault, func(injected string) string {
		if !s.alive(vm) {
			return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", vm.node, vm.vmid)
		}
		if injected != "" {
			return injected
		}
		if vm.running() {
			vm.stopGuest()
		}
		return ""
	})
	return t.upid, nil
}

func (s *Server) handleShutdown(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	d := s.lat.Shutdown
	s.mu.Unlock()
	return s.powerOff(rc, "qmshutdown", d)
}

func (s *Server) handleStop(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	d := s.lat.Stop
	s.mu.Unlock()
	return s.powerOff(rc, "qmstop", d)
}

func (s *Server) handleReboot(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	if !vm.running() {
		return nil, failf("VM %d not running", vm.vmid)
	}
	t := s.newTask(vm.node, "qmreboot", strconv.Itoa(vm.vmid), rc.user)
	if l := vm.lock(); l != "" {
		t.finish(fmt.Sprintf("VM is locked (%s)", l))
		return t.upid, nil
	}
	s.runTask(t, s.lat.Shutdown+s.lat.Start, rc.taskFault, func(injected string) string {
		if !s.alive(vm) {
			return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", vm.node, vm.vmid)
		}
		if injected != "" {
			return injected
		}
		if !vm.running() {
			return fmt.Sprintf("VM %d not running", vm.vmid)
		}
		s.boot(vm)
		return ""
	})
	return t.upid, nil
}

// baseVolumeInUse reports a template disk that linked clones still use.
func (s *Server) baseVolumeInUse(tmpl *vmState) string {
	for _, d := range vmDisks(tmpl.config) {
		if !isBaseVolume(d.d.file) {
			continue
		}
		for _, other := range s.vms {
			if other == tmpl {
				continue
			}
			for _, od := range vmDisks(other.config) {
				if strings.HasPrefix(od.d.file, d.d.file+"/") {
					return fmt.Sprintf("base volume '%s' is still in use by linked cloned", d.d.file)
				}
			}
		}
	}
	return ""
}

// handleDelete implements DELETE /nodes/{node}/qemu/{vmid}: early checks
// answer at once, the lock check happens in the task, and while the task
// runs the VM carries "lock: destroyed".
func (s *Server) handleDelete(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	if truthy(vm.config["protection"]) {
		return nil, failf("can't remove VM %d - protection mode enabled", vm.vmid)
	}
	if vm.running() {
		return nil, failf("VM %d is running - destroy failed", vm.vmid)
	}
	t := s.newTask(vm.node, "qmdestroy", strconv.Itoa(vm.vmid), rc.user)
	if l := vm.lock(); l != "" && !truthy(rc.params["skiplock"]) {
		t.finish(fmt.Sprintf("VM is locked (%s)", l))
		return t.upid, nil
	}
	if msg := s.baseVolumeInUse(vm); msg != "" {
		t.finish(msg)
		return t.upid, nil
	}
	prevLock, hadLock := vm.config["lock"]
	vm.config["lock"] = "destroyed"
	for _, d := range vmDisks(vm.config) {
		t.logf("  Logical volume \"%s\" successfully removed.", strings.TrimPrefix(d.d.file, d.d.storageID()+":"))
	}
	if truthy(rc.params["purge"]) {
		t.logf("purging VM %d from related configurations..", vm.vmid)
	}
	s.runTask(t, s.lat.Delete, rc.taskFault, func(injected string) string {
		if !s.alive(vm) {
			return fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", vm.node, vm.vmid)
		}
		if injected != "" {
			if hadLock {
				vm.config["lock"] = prevLock
			} else {
				delete(vm.config, "lock")
			}
			return injected
		}
		if vm.running() {
			delete(vm.config, "lock")
			return fmt.Sprintf("VM %d is running - destroy failed", vm.vmid)
		}
		delete(s.vms, vm.vmid)
		return ""
	})
	return t.upid, nil
}

// ---------------------------------------------------------------------------
// guest agent

// guestIPv4 is the address the guest reports: ipconfig0's static address
// if cloud-init was given one, else the address "DHCP" handed out.
func guestIPv4(vm *vmState) (string, int) {
	for _, p := range strings.Split(vm.config["ipconfig0"], ",") {
		if v, ok := strings.CutPrefix(p, "ip="); ok && v != "dhcp" {
			if ip, ipnet, err := net.ParseCIDR(v); err == nil && ip.To4() != nil {
				ones, _ := ipnet.Mask.Size()
				return ip.String(), ones
			}
		}
	}
	return vm.ip, 24
}

func linkLocal(mac string) string {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return "fe80::1"
	}
	ip := net.IP{0xfe, 0x80, 0, 0, 0, 0, 0, 0, hw[0] ^ 2, hw[1], hw[2], 0xff, 0xfe, hw[3], hw[4], hw[5]}
	return ip.String()
}

func (s *Server) handleAgent(rc *reqCtx) (any, *apiError) {
	cmd := rc.vars["command"]
	wantMethod := map[string]string{
		"network-get-interfaces": http.MethodGet, "get-osinfo": http.MethodGet, "get-host-name": http.MethodGet,
		"info": http.MethodGet, "get-time": http.MethodGet, "ping": http.MethodPost,
	}[cmd]
	if wantMethod == "" || wantMethod != rc.method {
		return nil, errf(http.StatusNotImplemented, "Method '%s %s' not implemented", rc.method, rc.path)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vm, aerr := s.lookupVM(rc)
	if aerr != nil {
		return nil, aerr
	}
	if !vm.running() {
		return nil, failf("VM %d is not running", vm.vmid)
	}
	if !agentEnabled(vm.config) {
		return nil, failf("No QEMU guest agent configured")
	}
	if !vm.agentUp {
		return nil, failf("QEMU guest agent is not running")
	}
	switch cmd {
	case "ping":
		return map[string]any{"result": map[string]any{}}, nil
	case "get-host-name":
		return map[string]any{"result": map[string]any{"host-name": vm.displayName()}}, nil
	case "get-time":
		return map[string]any{"result": time.Now().UnixNano()}, nil
	case "info":
		return map[string]any{"result": map[string]any{"version": "8.2.2", "supported_commands": []any{}}}, nil
	case "get-osinfo":
		return map[string]any{"result": map[string]any{
			"id": "ubuntu", "name": "Ubuntu", "pretty-name": "Ubuntu 24.04 LTS", "version": "24.04 LTS (Noble Numbat)",
			"version-id": "24.04", "kernel-release": "6.8.0-31-generic", "kernel-version": "#31-Ubuntu SMP PREEMPT_DYNAMIC",
			"machine": "x86_64",
		}}, nil
	}
	ifaces := []map[string]any{{
		"name":             "lo",
		"hardware-address": "00:00:00:00:00:00",
		"ip-addresses": []map[string]any{
			{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
			{"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128},
		},
		"statistics": map[string]any{"rx-bytes": 1024, "rx-packets": 12, "rx-errs": 0, "rx-dropped": 0,
			"tx-bytes": 1024, "tx-packets": 12, "tx-errs": 0, "tx-dropped": 0},
	}}
	for i := 0; i <= 31; i++ {
		v, ok := vm.config["net"+strconv.Itoa(i)]
		if !ok {
			continue
		}
		mac := strings.ToLower(netMAC(v))
		iface := map[string]any{
			"name":             "eth" + strconv.Itoa(i),
			"hardware-address": mac,
			"statistics": map[string]any{"rx-bytes": 2345678, "rx-packets": 3456, "rx-errs": 0, "rx-dropped": 0,
				"tx-bytes": 123456, "tx-packets": 1234, "tx-errs": 0, "tx-dropped": 0},
		}
		addrs := []map[string]any{}
		if i == 0 {
			ip, prefix := guestIPv4(vm)
			addrs = append(addrs, map[string]any{"ip-address-type": "ipv4", "ip-address": ip, "prefix": prefix})
		}
		addrs = append(addrs, map[string]any{"ip-address-type": "ipv6", "ip-address": linkLocal(mac), "prefix": 64})
		iface["ip-addresses"] = addrs
		ifaces = append(ifaces, iface)
	}
	return map[string]any{"result": ifaces}, nil
}
