package proxmoxsim

import (
	"strconv"
	"strings"
	"time"
)

const repoID = "faa83925c9641325"

func (s *Server) handleVersion(rc *reqCtx) (any, *apiError) {
	v := s.opts.Version
	release := v
	if parts := strings.Split(v, "."); len(parts) >= 2 {
		release = parts[0] + "." + parts[1]
	}
	return map[string]any{"version": v, "release": release, "repoid": repoID}, nil
}

// majorVersion is the major Proxmox VE version the simulator plays.
func (s *Server) majorVersion() int {
	major, _, _ := strings.Cut(s.opts.Version, ".")
	n, _ := strconv.Atoi(major)
	return n
}

// nodeUsage sums what the node's running VMs use.
func (s *Server) nodeUsage(node string) (memUsed uint64, cpu float64) {
	memUsed = 2 * gib // the host itself
	for _, vm := range s.vms {
		if vm.node == node && vm.running() {
			memUsed += uint64(memoryMiB(vm.config)) << 20 //nolint:gosec // memory is positive
			cpu += 0.02 * float64(cpuCount(vm.config))
		}
	}
	n := s.nodes[node]
	if cpu > float64(n.cfg.CPUs) {
		cpu = float64(n.cfg.CPUs)
	}
	return memUsed, cpu / float64(n.cfg.CPUs)
}

func (s *Server) nodeJSON(name string) map[string]any {
	n := s.nodes[name]
	m := map[string]any{"node": name, "id": "node/" + name, "type": "node", "status": "offline"}
	if !n.online {
		return m
	}
	mem, cpu := s.nodeUsage(name)
	m["status"] = "online"
	m["level"] = ""
	m["maxcpu"] = n.cfg.CPUs
	m["maxmem"] = n.cfg.Memory
	m["mem"] = mem
	m["cpu"] = cpu
	m["maxdisk"] = 100 * gib
	m["disk"] = 12 * gib
	m["uptime"] = int64(time.Since(n.since).Seconds()) + 86400
	m["ssl_fingerprint"] = "5B:EF:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:" + strconv.Itoa(10+n.id)
	return m
}

func (s *Server) handleNodes(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]map[string]any, 0, len(s.nodeOrder))
	for _, name := range s.nodeOrder {
		out = append(out, s.nodeJSON(name))
	}
	return out, nil
}

func (s *Server) handleNodeIndex(rc *reqCtx) (any, *apiError) {
	var out []map[string]string
	for _, n := range []string{"qemu", "lxc", "storage", "tasks", "status", "version", "network", "services"} {
		out = append(out, map[string]string{"name": n})
	}
	return out, nil
}

func (s *Server) handleNodeStatus(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := rc.vars["node"]
	n := s.nodes[name]
	mem, cpu := s.nodeUsage(name)
	total := n.cfg.Memory
	if mem > total {
		mem = total
	}
	cores := n.cfg.CPUs / 2
	if cores == 0 {
		cores = 1
	}
	return map[string]any{
		"cpu":  cpu,
		"wait": 0.0001,
		"idle": 0,
		"cpuinfo": map[string]any{
			"cpus": n.cfg.CPUs, "cores": cores, "sockets": 1, "model": "Simulated CPU @ 2.40GHz",
			"mhz": "2400.000", "hvm": "1", "flags": "fpu vme de pse tsc msr pae mce cx8 apic sep vmx", "user_hz": 100,
		},
		"memory":     map[string]any{"total": total, "used": mem, "free": total - mem},
		"swap":       map[string]any{"total": 8 * gib, "used": 0, "free": 8 * gib},
		"rootfs":     map[string]any{"total": 100 * gib, "used": 12 * gib, "free": 88 * gib, "avail": 83 * gib},
		"ksm":        map[string]any{"shared": 0},
		"uptime":     int64(time.Since(n.since).Seconds()) + 86400,
		"loadavg":    []string{"0.12", "0.18", "0.20"},
		"kversion":   "Linux 6.8.8-2-pve #1 SMP PREEMPT_DYNAMIC PMX 6.8.8-2 (2024-06-24T09:00Z) x86_64",
		"pveversion": "pve-manager/" + s.opts.Version + "/" + repoID,
		"boot-info":  map[string]any{"mode": "efi", "secureboot": 0},
		"current-kernel": map[string]any{
			"sysname": "Linux", "release": "6.8.8-2-pve", "machine": "x86_64",
			"version": "#1 SMP PREEMPT_DYNAMIC PMX 6.8.8-2 (2024-06-24T09:00Z)",
		},
	}, nil
}

func (s *Server) handleClusterStatus(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	online := 0
	for _, n := range s.nodes {
		if n.online {
			online++
		}
	}
	quorate := 0
	if online*2 > len(s.nodes) {
		quorate = 1
	}
	out := []map[string]any{{
		"type": "cluster", "id": "cluster", "name": s.opts.ClusterName,
		"version": len(s.nodes) + 1, "quorate": quorate, "nodes": len(s.nodes),
	}}
	for i, name := range s.nodeOrder {
		n := s.nodes[name]
		on, local := 0, 0
		if n.online {
			on = 1
		}
		if i == 0 {
			local = 1
		}
		out = append(out, map[string]any{
			"type": "node", "id": "node/" + name, "name": name, "nodeid": n.id,
			"ip": n.ip, "online": on, "local": local, "level": "",
		})
	}
	return out, nil
}

// vmResourceJSON is a VM's row in /cluster/resources.
func (s *Server) vmResourceJSON(vm *vmState) map[string]any {
	m := map[string]any{
		"id":        "qemu/" + strconv.Itoa(vm.vmid),
		"type":      "qemu",
		"vmid":      vm.vmid,
		"name":      vm.displayName(),
		"node":      vm.node,
		"status":    vm.status,
		"template":  0,
		"maxmem":    uint64(memoryMiB(vm.config)) << 20, //nolint:gosec // memory is positive
		"maxcpu":    cpuCount(vm.config),
		"maxdisk":   bootDiskSize(vm.config),
		"mem":       0,
		"cpu":       0,
		"disk":      0,
		"uptime":    0,
		"netin":     0,
		"netout":    0,
		"diskread":  0,
		"diskwrite": 0,
	}
	if vm.isTemplate() {
		m["template"] = 1
	}
	if t := vm.config["tags"]; t != "" {
		m["tags"] = t
	}
	if l := vm.lock(); l != "" {
		m["lock"] = l
	}
	if vm.pool != "" {
		m["pool"] = vm.pool
	}
	if vm.running() {
		m["mem"] = (uint64(memoryMiB(vm.config)) << 20) / 3 //nolint:gosec // memory is positive
		m["cpu"] = 0.02
		m["uptime"] = int64(time.Since(vm.startedAt).Seconds())
		m["netin"] = 123456
		m["netout"] = 65432
	}
	if n := s.nodes[vm.node]; n != nil && !n.online {
		m["status"] = "unknown"
	}
	return m
}

func (s *Server) storageUsed(si *storageInst) int64 {
	var used int64
	for _, f := range si.files {
		used += f.size
	}
	for _, vm := range s.vms {
		if si.node != "" && vm.node != si.node {
			continue
		}
		for _, d := range vmDisks(vm.config) {
			if d.d.storageID() == si.cfg.Name {
				used += d.d.size()
			}
		}
	}
	return used
}

// storageJSON is a storage's row in /nodes/{node}/storage (and its status).
func (s *Server) storageJSON(si *storageInst) map[string]any {
	used := uint64(s.storageUsed(si)) //nolint:gosec // sizes are positive
	total := si.cfg.Capacity
	if used > total {
		used = total
	}
	shared := 0
	if si.cfg.Shared {
		shared = 1
	}
	return map[string]any{
		"storage":       si.cfg.Name,
		"type":          si.cfg.Type,
		"content":       strings.Join(si.cfg.Content, ","),
		"shared":        shared,
		"enabled":       1,
		"active":        1,
		"total":         total,
		"used":          used,
		"avail":         total - used,
		"used_fraction": float64(used) / float64(total),
	}
}

func (s *Server) handleClusterResources(rc *reqCtx) (any, *apiError) {
	typ := rc.params["type"]
	switch typ {
	case "", "vm", "storage", "node", "sdn":
	default:
		return nil, paramErr("type", "value '"+typ+"' does not have a value in the enumeration 'vm, storage, node, sdn'")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{}
	if typ == "" || typ == "node" {
		for _, name := range s.nodeOrder {
			m := s.nodeJSON(name)
			delete(m, "ssl_fingerprint")
			out = append(out, m)
		}
	}
	if typ == "" || typ == "vm" {
		for _, id := range sortedVMIDs(s.vms) {
			out = append(out, s.vmResourceJSON(s.vms[id]))
		}
	}
	if typ == "" || typ == "storage" {
		for _, name := range s.nodeOrder {
			for _, si := range s.nodeStorages(name) {
				st := s.storageJSON(si)
				status := "available"
				if !s.nodes[name].online {
					status = "unknown"
				}
				out = append(out, map[string]any{
					"id": "storage/" + name + "/" + si.cfg.Name, "type": "storage", "storage": si.cfg.Name,
					"node": name, "status": status, "content": st["content"], "plugintype": si.cfg.Type,
					"shared": st["shared"], "disk": st["used"], "maxdisk": st["total"],
				})
			}
		}
	}
	// Proxmox VE 9 nodes report their networks as type "network" rows (the
	// default localnetwork zone at least), listed only when no type is
	// asked for, and no longer as "sdn" rows (pve-manager
	// PVE::API2::Cluster resources); earlier versions list "sdn" rows.
	if s.majorVersion() >= 9 {
		if typ == "" {
			for _, name := range s.nodeOrder {
				out = append(out, map[string]any{"id": "network/" + name + "/zone/localnetwork", "type": "network",
					"network-type": "zone", "network": "localnetwork", "node": name, "status": "ok"})
			}
		}
	} else if typ == "" || typ == "sdn" {
		for _, name := range s.nodeOrder {
			out = append(out, map[string]any{"id": "sdn/" + name + "/localnetwork", "type": "sdn",
				"sdn": "localnetwork", "node": name, "status": "ok"})
		}
	}
	return out, nil
}

// handleNextID returns the lowest free VMID ≥ 100, or checks a given one.
// Like Proxmox it reserves nothing, so two callers can get the same ID.
func (s *Server) handleNextID(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := rc.params["vmid"]; ok {
		id, aerr := parseVMID("vmid", v)
		if aerr != nil {
			return nil, aerr
		}
		if _, taken := s.vms[id]; taken {
			return nil, paramErr("vmid", "VM "+strconv.Itoa(id)+" already exists")
		}
		return strconv.Itoa(id), nil
	}
	for id := 100; ; id++ {
		if _, taken := s.vms[id]; !taken {
			return strconv.Itoa(id), nil
		}
	}
}

func (s *Server) taskList(node string, params map[string]string) []map[string]any {
	limit := 50
	if v, err := strconv.Atoi(params["limit"]); err == nil && v >= 0 {
		limit = v
	}
	start, _ := strconv.Atoi(params["start"])
	vmid := params["vmid"]
	typeFilter := params["typefilter"]
	userFilter := params["userfilter"]
	onlyErrors := truthy(params["errors"])
	source := params["source"]
	// since and until bound the start time (UNIX seconds), as Proxmox's
	// task index is filtered.
	since, _ := strconv.ParseInt(params["since"], 10, 64)
	until, _ := strconv.ParseInt(params["until"], 10, 64)
	var rows []map[string]any
	for i := len(s.taskOrder) - 1; i >= 0; i-- {
		t := s.tasks[s.taskOrder[i]]
		if t == nil || (node != "" && t.node != node) {
			continue
		}
		if vmid != "" && t.id != vmid {
			continue
		}
		if typeFilter != "" && t.typ != typeFilter {
			continue
		}
		// Proxmox matches userfilter as a case-insensitive substring of
		// the user the row shows (node_tasks: m/\Q$userfilter\E/i).
		if userFilter != "" && !strings.Contains(strings.ToLower(t.listUser()), strings.ToLower(userFilter)) {
			continue
		}
		if onlyErrors && (t.running || t.exit == "OK") {
			continue
		}
		if (since > 0 && t.start.Unix() < since) || (until > 0 && t.start.Unix() > until) {
			continue
		}
		if (source == "" || source == "archive") && t.running && node != "" {
			continue
		}
		if source == "active" && !t.running {
			continue
		}
		if node == "" {
			rows = append(rows, t.clusterListJSON())
		} else {
			rows = append(rows, t.nodeListJSON())
		}
	}
	if start > len(rows) {
		start = len(rows)
	}
	rows = rows[start:]
	if node != "" && limit < len(rows) {
		rows = rows[:limit]
	}
	if rows == nil {
		rows = []map[string]any{}
	}
	return rows
}

func (s *Server) handleTaskList(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := rc.params
	// Proxmox lists only finished (archived) tasks unless source=active or
	// source=all asks for running ones.
	if p["source"] == "" {
		p["source"] = "archive"
	}
	return s.taskList(rc.vars["node"], p), nil
}

func (s *Server) handleClusterTasks(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taskList("", map[string]string{"source": "all"}), nil
}

func (s *Server) findTask(rc *reqCtx) (*taskState, *apiError) {
	upid := rc.vars["upid"]
	node, ok := parseUPID(upid)
	if !ok {
		return nil, paramErr("upid", "unable to parse worker upid '"+upid+"'")
	}
	if node != rc.vars["node"] {
		return nil, paramErr("upid", "unable to parse worker upid '"+upid+"' - wrong node")
	}
	t, found := s.tasks[upid]
	if !found {
		// A parameter error, 400, as pve-manager PVE::API2::Tasks raises it.
		return nil, paramErr("upid", "no such task")
	}
	return t, nil
}

func (s *Server) handleTaskStatus(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, aerr := s.findTask(rc)
	if aerr != nil {
		return nil, aerr
	}
	return t.statusJSON(), nil
}

func (s *Server) handleTaskLog(rc *reqCtx) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, aerr := s.findTask(rc)
	if aerr != nil {
		return nil, aerr
	}
	start, _ := strconv.Atoi(rc.params["start"])
	limit := 50
	if v, err := strconv.Atoi(rc.params["limit"]); err == nil && v > 0 {
		limit = v
	}
	lines := t.log
	if len(lines) == 0 && t.running {
		lines = []string{"no content"}
	}
	out := []map[string]any{}
	for i := start; i < len(lines) && i < start+limit; i++ {
		if i < 0 {
			continue
		}
		out = append(out, map[string]any{"n": i + 1, "t": lines[i]})
	}
	return out, nil
}
