package proxmoxsim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
)

// ---------------------------------------------------------------------------
// helpers

func startSim(t *testing.T, opts Options) *Server {
	t.Helper()
	s := New(opts)
	if err := s.Start(); err != nil {
		t.Fatalf("start simulator: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// httpClientFor trusts only the simulator's CA, as the operator does with
// its CA bundle.
func httpClientFor(t *testing.T, s *Server) (*http.Client, *http.Transport) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CACertPEM()) {
		t.Fatal("CACertPEM holds no certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}, tr
}

func tokenClient(t *testing.T, s *Server) *proxmox.Client {
	t.Helper()
	hc, _ := httpClientFor(t, s)
	id, secret := s.APIToken()
	return proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithAPIToken(id, secret))
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustNode(t *testing.T, c *proxmox.Client, name string) *proxmox.Node {
	t.Helper()
	n, err := c.Node(ctxT(t), name)
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	return n
}

func mustVM(t *testing.T, n *proxmox.Node, vmid int) *proxmox.VirtualMachine {
	t.Helper()
	vm, err := n.VirtualMachine(ctxT(t), vmid)
	if err != nil {
		t.Fatalf("VM %d: %v", vmid, err)
	}
	return vm
}

// waitTask waits for a task to finish and returns it (successful or not).
func waitTask(t *testing.T, task *proxmox.Task, err error) *proxmox.Task {
	t.Helper()
	if err != nil {
		t.Fatalf("starting task: %v", err)
	}
	if task == nil {
		t.Fatal("no task returned")
	}
	if err := task.Wait(ctxT(t), 5*time.Millisecond, 10*time.Second); err != nil {
		t.Fatalf("waiting for task %s: %v", task.UPID, err)
	}
	return task
}

func waitOK(t *testing.T, task *proxmox.Task, err error) {
	t.Helper()
	task = waitTask(t, task, err)
	if !task.IsSuccessful {
		t.Fatalf("task %s failed: %q", task.UPID, task.ExitStatus)
	}
}

// succeeds is waitOK for a call that returns (task, error).
func succeeds(t *testing.T) func(*proxmox.Task, error) {
	t.Helper()
	return func(task *proxmox.Task, err error) {
		t.Helper()
		waitOK(t, task, err)
	}
}

func waitFailed(t *testing.T, task *proxmox.Task, err error, want string) {
	t.Helper()
	task = waitTask(t, task, err)
	if !task.IsFailed {
		t.Fatalf("task %s succeeded, want failure %q", task.UPID, want)
	}
	if !strings.Contains(task.ExitStatus, want) {
		t.Fatalf("task exit status %q, want it to contain %q", task.ExitStatus, want)
	}
}

// eventually polls cond until it holds or the bound passes.
func wantErr(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", substr)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("error %q does not contain %q", err, substr)
	}
}

// sshKey builds a syntactically valid ed25519 authorized_keys line.
func sshKey(seed byte, comment string) string {
	blob := []byte{0, 0, 0, 11}
	blob = append(blob, "ssh-ed25519"...)
	blob = append(blob, 0, 0, 0, 32)
	for i := 0; i < 32; i++ {
		blob = append(blob, seed+byte(i))
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob) + " " + comment
}

// ---------------------------------------------------------------------------
// read-only API

func TestVersionNodesClusterAndNextID(t *testing.T) {
	s := startSim(t, Options{})
	s.AddTemplate("pve1", 9000, "ubuntu-2404", nil)
	s.AddVM("pve2", 150, "foreign", []string{"team-a", "prod"}, true)
	c := tokenClient(t, s)
	ctx := ctxT(t)

	v, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != "8.2.4" || v.Release != "8.2" {
		t.Fatalf("version = %+v", v)
	}

	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].Node != "pve1" || nodes[0].Status != "online" || nodes[0].MaxCPU != 16 || nodes[0].MaxMem != 64<<30 {
		t.Fatalf("nodes = %+v", nodes[0])
	}
	n := mustNode(t, c, "pve1")
	if n.CPUInfo.CPUs != 16 || n.Memory.Total != 64<<30 || !strings.HasPrefix(n.PVEVersion, "pve-manager/8.2.4/") {
		t.Fatalf("node status = %+v", n)
	}
	if _, err := c.Node(ctx, "pve9"); err == nil || !strings.Contains(err.Error(), "hostname lookup 'pve9' failed") {
		t.Fatalf("unknown node: %v", err)
	}

	cl, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Quorate != 1 || len(cl.Nodes) != 2 || cl.Name != "hyperfleet-sim" {
		t.Fatalf("cluster = %+v", cl)
	}

	all, err := cl.Resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range all {
		kinds[r.Type]++
	}
	if kinds["node"] != 2 || kinds["qemu"] != 2 || kinds["storage"] != 4 {
		t.Fatalf("resource kinds = %v", kinds)
	}
	vms, err := cl.Resources(ctx, "vm")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[uint64]*proxmox.ClusterResource{}
	for _, r := range vms {
		if r.Type != "qemu" {
			t.Fatalf("type filter let through %q", r.Type)
		}
		byID[r.VMID] = r
	}
	if r := byID[9000]; r == nil || r.Template != 1 || r.Name != "ubuntu-2404" || r.Node != "pve1" || r.Status != "stopped" || r.MaxMem != 2048<<20 || r.MaxCPU != 2 {
		t.Fatalf("template resource = %+v", byID[9000])
	}
	if r := byID[150]; r == nil || r.Template != 0 || r.Tags != "prod;team-a" || r.Status != "running" {
		t.Fatalf("VM resource = %+v", byID[150])
	}
	storages, err := cl.Resources(ctx, "storage")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range storages {
		if r.Storage == "local-lvm" && (r.Shared != 0 || r.Content != "images,rootdir" || r.PluginType != "lvmthin") {
			t.Fatalf("local-lvm resource = %+v", r)
		}
	}

	// nextid is racy: it reserves nothing.
	id1, err := cl.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := cl.NextID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id1 != 100 || id2 != 100 {
		t.Fatalf("nextid = %d, %d; want 100 twice", id1, id2)
	}
	if free, err := cl.CheckID(ctx, 150); err != nil || free {
		t.Fatalf("CheckID(150) = %v, %v; want taken", free, err)
	}
	if free, err := cl.CheckID(ctx, 151); err != nil || !free {
		t.Fatalf("CheckID(151) = %v, %v; want free", free, err)
	}

	list, err := n.VirtualMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || int(list[0].VMID) != 9000 || !bool(list[0].Template) {
		t.Fatalf("pve1 VMs = %+v", list)
	}
	sts, err := n.Storages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || sts[0].Name != "local" || sts[1].Name != "local-lvm" || sts[1].Type != "lvmthin" || sts[0].Enabled != 1 {
		t.Fatalf("storages = %+v %+v", sts[0], sts[1])
	}
	if st, err := n.StorageISO(ctx); err != nil || st.Name != "local" {
		t.Fatalf("iso storage = %v, %v", st, err)
	}

	if got := s.RequestCount("GET", `^/cluster/nextid$`); got != 4 {
		t.Fatalf("nextid requests = %d, want 4 (query strings are not part of the path)", got)
	}
	if st := s.Stats(); st[OpNextID] != 4 || st[OpVersion] != 1 {
		t.Fatalf("stats = %v", st)
	}
}

// ---------------------------------------------------------------------------
// the VM lifecycle

func TestCloneConfigureResizeStartShutdownDelete(t *testing.T) {
	lat := DefaultLatencies()
	lat.Clone = time.Second           // long enough to look at the VM mid-clone
	lat.Boot = 800 * time.Millisecond // long enough to see the agent down first
	lat.CloneConfigLag = 0            // the temporary config is checked right after the call
	s := startSim(t, Options{Latencies: lat})
	s.AddTemplate("pve1", 9000, "ubuntu-2404", map[string]string{"tags": "golden", "description": "base image"})
	c := tokenClient(t, s)
	ctx := ctxT(t)
	n := mustNode(t, c, "pve1")
	tmpl := mustVM(t, n, 9000)
	if !bool(tmpl.Template) {
		t.Fatal("template not reported as template")
	}
	tmplMAC := tmpl.VirtualMachineConfig.Nets["net0"]

	newid, task, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{Name: "runner-1", Description: "owner: abc", Pool: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if newid != 100 {
		t.Fatalf("clone picked VMID %d, want nextid 100", newid)
	}
	if task.Type != "qmclone" || task.ID != "9000" || task.Node != "pve1" || task.User != "root@pam!hyperfleet" {
		t.Fatalf("UPID %q parsed as %+v", task.UPID, task)
	}
	// The new VM exists at once, locked, with nothing but qm clone's
	// temporary config (no name, no tags, not our description); the full
	// config appears, still locked, once the disks are cloned.
	if vm, ok := s.VM(newid); !ok || vm.Lock != "clone" || vm.Name != "" || vm.Description != " qmclone temporary file" || len(vm.Config) != 2 {
		t.Fatalf("VM during clone = %+v", vm)
	}
	if during := mustVM(t, n, newid); during.Lock != "clone" || during.VirtualMachineConfig.Lock != "clone" || during.Name != "VM 100" {
		t.Fatalf("API during clone: lock %q / %q, name %q", during.Lock, during.VirtualMachineConfig.Lock, during.Name)
	}
	eventually.True(t, 5*time.Second, "the cloned config to be written", func() bool {
		vm, _ := s.VM(newid)
		return vm.Name == "runner-1" && vm.Lock == "clone" || vm.Lock == ""
	})
	waitOK(t, task, nil)

	vm := mustVM(t, n, newid)
	cfg := vm.VirtualMachineConfig
	if vm.Name != "runner-1" || vm.Lock != "" || bool(vm.Template) || cfg.Lock != "" || bool(cfg.Template) {
		t.Fatalf("clone: name %q lock %q template %v", vm.Name, vm.Lock, vm.Template)
	}
	if cfg.Description != "owner: abc" || cfg.Tags != "golden" {
		t.Fatalf("clone description %q tags %q", cfg.Description, cfg.Tags)
	}
	if cfg.Nets["net0"] == tmplMAC || !strings.HasPrefix(cfg.Nets["net0"], "virtio=BC:24:11:") {
		t.Fatalf("clone net0 %q must get a new MAC (template %q)", cfg.Nets["net0"], tmplMAC)
	}
	if !strings.HasPrefix(cfg.SCSIs["scsi0"], "local-lvm:base-9000-disk-0/vm-100-disk-0,") {
		t.Fatalf("linked clone disk = %q", cfg.SCSIs["scsi0"])
	}
	if snap, _ := s.VM(newid); snap.Pool != "ci" {
		t.Fatalf("pool = %q", snap.Pool)
	}

	// Asynchronous config with cloud-init settings.
	keys := proxmox.EncodeSSHKeys(sshKey(1, "alice@example.com"), sshKey(2, "bob@example.com"))
	succeeds(t)(vm.Config(ctx,
		proxmox.VirtualMachineOption{Name: "cores", Value: 4},
		proxmox.VirtualMachineOption{Name: "memory", Value: 4096},
		proxmox.VirtualMachineOption{Name: "ciuser", Value: "runner"},
		proxmox.VirtualMachineOption{Name: "sshkeys", Value: keys},
		proxmox.VirtualMachineOption{Name: "ipconfig0", Value: "ip=192.168.50.10/24,gw=192.168.50.1"},
		proxmox.VirtualMachineOption{Name: "nameserver", Value: "1.1.1.1 8.8.8.8"},
		proxmox.VirtualMachineOption{Name: "searchdomain", Value: "example.com"},
		proxmox.VirtualMachineOption{Name: "net0", Value: "virtio,bridge=vmbr1,tag=42"},
		proxmox.VirtualMachineOption{Name: "ide2", Value: "local-lvm:cloudinit"},
		proxmox.VirtualMachineOption{Name: "onboot", Value: true},
		proxmox.VirtualMachineOption{Name: "tags", Value: "hyperfleet;hf-owner-abc"},
		proxmox.VirtualMachineOption{Name: "delete", Value: "vmgenid"},
	))
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	cfg = vm.VirtualMachineConfig
	switch {
	case cfg.Cores == nil || *cfg.Cores != 4, cfg.Memory != 4096, !bool(cfg.OnBoot):
		t.Fatalf("cores/memory/onboot = %v/%v/%v", cfg.Cores, cfg.Memory, cfg.OnBoot)
	case cfg.CIUser != "runner", cfg.SSHKeys != keys:
		t.Fatalf("ciuser %q sshkeys %q", cfg.CIUser, cfg.SSHKeys)
	case cfg.IPConfigs["ipconfig0"] != "ip=192.168.50.10/24,gw=192.168.50.1", cfg.Nameserver != "1.1.1.1 8.8.8.8", cfg.Searchdomain != "example.com":
		t.Fatalf("network = %v %q %q", cfg.IPConfigs, cfg.Nameserver, cfg.Searchdomain)
	case cfg.IDEs["ide2"] != "local-lvm:vm-100-cloudinit,media=cdrom":
		t.Fatalf("ide2 = %q", cfg.IDEs["ide2"])
	case cfg.Tags != "hf-owner-abc;hyperfleet", cfg.VMGenID != nil: // sorted, as Proxmox stores them
		t.Fatalf("tags %q vmgenid %v", cfg.Tags, cfg.VMGenID)
	case !strings.Contains(cfg.Nets["net0"], "bridge=vmbr1") || !strings.HasPrefix(cfg.Nets["net0"], "virtio=BC:24:11:"):
		t.Fatalf("net0 = %q", cfg.Nets["net0"])
	}

	// Synchronous config, and what Proxmox's schema rejects.
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "name", Value: "runner-1a"}); err != nil {
		t.Fatal(err)
	}
	if snap, _ := s.VM(newid); snap.Name != "runner-1a" {
		t.Fatalf("name after PUT = %q", snap.Name)
	}
	wantErr(t, vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "name", Value: "not_a_dns_name"}), "valid DNS name")
	wantErr(t, vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "sshkeys", Value: strings.ReplaceAll(keys, "%20", "+")}), "invalid urlencoded string")
	wantErr(t, vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "sshkeys", Value: proxmox.EncodeSSHKeys("ssh-ed25519 bm90IGEga2V5 eve")}), "SSH public key validation error")
	wantErr(t, vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: "many"}), "type check ('integer') failed")
	wantErr(t, vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "bogus", Value: "1"}), "property is not defined in schema")

	// Resize: grow works, shrinking fails in the task.
	succeeds(t)(vm.ResizeDisk(ctx, "scsi0", "+8G"))
	if snap, _ := s.VM(newid); !strings.HasSuffix(snap.Config["scsi0"], "size=40G") {
		t.Fatalf("scsi0 after resize = %q", snap.Config["scsi0"])
	}
	succeeds(t)(vm.ResizeDisk(ctx, "scsi0", "40G")) // same size: nothing to do
	task, err = vm.ResizeDisk(ctx, "scsi0", "10G")
	waitFailed(t, task, err, "shrinking disks is not supported")
	task, err = vm.ResizeDisk(ctx, "scsi7", "+1G")
	waitFailed(t, task, err, "disk 'scsi7' does not exist")

	// Start: running after the start task, the agent answers after boot.
	succeeds(t)(vm.Start(ctx))
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if !vm.IsRunning() {
		t.Fatalf("status after start = %q", vm.Status)
	}
	if _, err := vm.AgentGetNetworkIFaces(ctx); err == nil || err.Error() != "500 QEMU guest agent is not running" {
		t.Fatalf("agent before boot: %v", err)
	}
	var ifaces []*proxmox.AgentNetworkIface
	eventually.True(t, 5*time.Second, "the guest agent", func() bool {
		ifaces, err = vm.AgentGetNetworkIFaces(ctx)
		return err == nil
	})
	if len(ifaces) != 1 || ifaces[0].Name != "eth0" || len(ifaces[0].IPAddresses) == 0 ||
		ifaces[0].IPAddresses[0].IPAddress != "192.168.50.10" || ifaces[0].IPAddresses[0].Prefix != 24 {
		t.Fatalf("interfaces = %+v", ifaces)
	}
	mac := strings.ToLower(strings.TrimPrefix(strings.Split(vm.VirtualMachineConfig.Nets["net0"], ",")[0], "virtio="))
	if ifaces[0].HardwareAddress != mac {
		t.Fatalf("eth0 MAC %q, net0 MAC %q", ifaces[0].HardwareAddress, mac)
	}
	if snap, _ := s.VM(newid); snap.IP != "192.168.50.10" || !snap.AgentRunning {
		t.Fatalf("snapshot IP %q agent %v", snap.IP, snap.AgentRunning)
	}
	task, err = vm.Start(ctx)
	waitFailed(t, task, err, "VM 100 already running")
	wantErr(t, func() error { _, err := vm.Delete(ctx, nil); return err }(), "500 VM 100 is running - destroy failed")

	// Shutdown, then delete.
	succeeds(t)(vm.Shutdown(ctx))
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if !vm.IsStopped() {
		t.Fatalf("status after shutdown = %q", vm.Status)
	}
	if snap, _ := s.VM(newid); snap.IP != "" || snap.AgentRunning {
		t.Fatalf("stopped VM still reports IP %q", snap.IP)
	}
	succeeds(t)(vm.Delete(ctx, &proxmox.VirtualMachineDeleteOptions{Purge: true, DestroyUnreferencedDisks: true}))
	if _, ok := s.VM(newid); ok {
		t.Fatal("VM still exists after delete")
	}
	_, err = n.VirtualMachine(ctx, newid)
	wantErr(t, err, "500 Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist")
}

func TestCloneRefusals(t *testing.T) {
	lat := DefaultLatencies()
	lat.Clone = time.Second // long enough to poke at the locked VM mid-clone
	lat.CloneConfigLag = 0  // the locked VM is poked right after the call
	s := startSim(t, Options{
		Latencies: lat,
		Storages: []Storage{
			{Name: "local", Type: "dir", Content: []string{"iso", "vztmpl", "snippets", "backup"}},
			{Name: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
			{Name: "ceph", Type: "rbd", Content: []string{"images"}, Shared: true},
		},
	})
	s.AddTemplate("pve1", 9000, "ubuntu-2404", nil)
	s.AddTemplate("pve1", 9001, "ubuntu-on-ceph", map[string]string{"scsi0": "ceph:base-9001-disk-0,size=16G"})
	s.AddVM("pve1", 150, "taken", nil, false)
	c := tokenClient(t, s)
	ctx := ctxT(t)
	n1 := mustNode(t, c, "pve1")
	n2 := mustNode(t, c, "pve2")
	tmpl := mustVM(t, n1, 9000)
	plain := mustVM(t, n1, 150)

	clone := func(vm *proxmox.VirtualMachine, o proxmox.VirtualMachineCloneOptions) (*proxmox.Task, error) {
		_, task, err := vm.Clone(ctx, &o)
		return task, err
	}
	_, err := clone(tmpl, proxmox.VirtualMachineCloneOptions{NewID: 150})
	wantErr(t, err, "500 unable to create VM 150: config file already exists")
	_, err = clone(tmpl, proxmox.VirtualMachineCloneOptions{NewID: 201, Target: "pve2"})
	wantErr(t, err, "can't clone VM to node 'pve2' (VM uses local storage)")
	_, err = clone(tmpl, proxmox.VirtualMachineCloneOptions{NewID: 201, Target: "pve2", Full: true, Storage: "local-lvm"})
	wantErr(t, err, "can't clone to non-shared storage 'local-lvm'")
	_, err = clone(tmpl, proxmox.VirtualMachineCloneOptions{NewID: 201, Storage: "local-lvm"})
	wantErr(t, err, "parameter 'storage' not allowed for linked clones")
	_, err = clone(plain, proxmox.VirtualMachineCloneOptions{NewID: 201, Full: false})
	if err != nil {
		t.Fatalf("a full clone of a plain VM (full defaults to 1) failed: %v", err)
	}
	_, err = clone(tmpl, proxmox.VirtualMachineCloneOptions{NewID: 202, Name: "bad_name"})
	wantErr(t, err, "bad request")
	// The template lives on pve1: asking pve2 to clone it fails like Proxmox.
	wrong := &proxmox.VirtualMachine{}
	wrong.New(c, "pve2", 9000)
	_, err = clone(wrong, proxmox.VirtualMachineCloneOptions{NewID: 203})
	wantErr(t, err, "Configuration file 'nodes/pve2/qemu-server/9000.conf' does not exist")

	// A shared-storage template may be cloned to another node; the VM sits
	// on the source node while the clone runs, then moves.
	ceph := mustVM(t, n1, 9001)
	task, err := clone(ceph, proxmox.VirtualMachineCloneOptions{NewID: 210, Target: "pve2", Name: "on-ceph"})
	if err != nil {
		t.Fatal(err)
	}
	if vm, _ := s.VM(210); vm.Node != "pve1" || vm.Lock != "clone" {
		t.Fatalf("during cross-node clone: %+v", vm)
	}
	// While locked, the VM refuses configuration, start and destroy.
	locked := &proxmox.VirtualMachine{}
	locked.New(c, "pve1", 210)
	wantErr(t, locked.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 2}), "500 VM is locked (clone)")
	st, err := locked.Start(ctx)
	waitFailed(t, st, err, "VM is locked (clone)")
	dt, err := locked.Delete(ctx, nil)
	waitFailed(t, dt, err, "VM is locked (clone)")
	waitOK(t, task, nil)
	if vm, _ := s.VM(210); vm.Node != "pve2" || vm.Lock != "" || vm.Name != "on-ceph" {
		t.Fatalf("after cross-node clone: %+v", vm)
	}
	if vm := mustVM(t, n2, 210); vm.Name != "on-ceph" {
		t.Fatalf("pve2 sees %q", vm.Name)
	}
	succeeds(t)(clone(plain, proxmox.VirtualMachineCloneOptions{NewID: 211}))
	if vm, _ := s.VM(211); vm.Name != "Copy-of-VM-taken" || !strings.HasPrefix(vm.Config["scsi0"], "local-lvm:vm-211-disk-0,") {
		t.Fatalf("default clone name/disk: %q %q", vm.Name, vm.Config["scsi0"])
	}
}

// TestStorageLockContention shows what the operator's admission control
// prevents: more concurrent clones on one storage than its lock tolerates.
func TestStorageLockContention(t *testing.T) {
	lat := DefaultLatencies()
	lat.Clone = 800 * time.Millisecond
	s := startSim(t, Options{Latencies: lat, StorageLockLimit: 2})
	s.AddTemplate("pve1", 9000, "tmpl-a", nil)
	s.AddTemplate("pve2", 9001, "tmpl-b", nil)
	c := tokenClient(t, s)
	ctx := ctxT(t)
	tmpl := mustVM(t, mustNode(t, c, "pve1"), 9000)
	other := mustVM(t, mustNode(t, c, "pve2"), 9001)

	var tasks []*proxmox.Task
	for i := 0; i < 5; i++ {
		_, task, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 300 + i})
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
	// pve2's local-lvm is another storage: its lock is free.
	_, otherTask, err := other.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 400})
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i, task := range tasks {
		task = waitTask(t, task, nil)
		if task.IsFailed {
			failed++
			want := "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"
			if task.ExitStatus != want {
				t.Fatalf("exit status %q, want %q", task.ExitStatus, want)
			}
			if _, ok := s.VM(300 + i); ok {
				t.Fatalf("failed clone %d left its VM behind", 300+i)
			}
		} else if vm, ok := s.VM(300 + i); !ok || vm.Lock != "" {
			t.Fatalf("successful clone %d: %+v", 300+i, vm)
		}
	}
	if failed != 3 {
		t.Fatalf("%d clones failed, want 3 (5 clones, lock limit 2)", failed)
	}
	waitOK(t, otherTask, nil)
	// Once the lock is free again, clones succeed.
	_, task, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 310})
	waitOK(t, task, err)
}

// ---------------------------------------------------------------------------
// authentication

func TestAuthentication(t *testing.T) {
	s := startSim(t, Options{Password: "s3cret"})
	s.AddTemplate("pve1", 9000, "tmpl", nil)
	ctx := ctxT(t)
	hc, _ := httpClientFor(t, s)
	id, secret := s.APIToken()

	_, err := proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithAPIToken(id, "wrong")).Version(ctx)
	if !proxmox.IsNotAuthorized(err) {
		t.Fatalf("wrong secret: %v", err)
	}
	_, err = proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithAPIToken("root@pam!other", secret)).Version(ctx)
	if !proxmox.IsNotAuthorized(err) {
		t.Fatalf("wrong token ID: %v", err)
	}
	_, err = proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc)).Version(ctx)
	if !proxmox.IsNotAuthorized(err) {
		t.Fatalf("no credentials: %v", err)
	}

	// Token rotation: the old token stops working at once.
	old := proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithAPIToken(id, secret))
	if _, err := old.Version(ctx); err != nil {
		t.Fatal(err)
	}
	s.SetAPIToken("root@pam!rotated", "new-secret")
	if _, err := old.Version(ctx); !proxmox.IsNotAuthorized(err) {
		t.Fatalf("old token after rotation: %v", err)
	}
	rotated := proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithAPIToken("root@pam!rotated", "new-secret"))
	if _, err := rotated.Version(ctx); err != nil {
		t.Fatalf("new token: %v", err)
	}

	// Ticket login (lazy, after the first 401), including writes with CSRF.
	user, pass := s.Credentials()
	if user != "root@pam" || pass != "s3cret" {
		t.Fatalf("credentials = %q %q", user, pass)
	}
	ticket := proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithCredentials(&proxmox.Credentials{Username: "root", Realm: "pam", Password: "s3cret"}))
	n := mustNode(t, ticket, "pve1")
	_, task, err := mustVM(t, n, 9000).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 120})
	waitOK(t, task, err)
	if task.User != "root@pam" {
		t.Fatalf("task user %q", task.User)
	}
	sess := ticket.Session()
	if sess == nil || !strings.HasPrefix(sess.Ticket, "PVE:root@pam:") || sess.CSRFPreventionToken == "" {
		t.Fatalf("session = %+v", sess)
	}
	if err := ticket.RefreshTicket(ctx); err != nil {
		t.Fatalf("ticket renewal: %v", err)
	}
	// A write with a bad CSRF token is refused, a read is not.
	badCSRF := proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithSession(ticket.Session().Ticket, "bogus"))
	if _, err := badCSRF.Version(ctx); err != nil {
		t.Fatalf("GET with ticket: %v", err)
	}
	vm := &proxmox.VirtualMachine{}
	vm.New(badCSRF, "pve1", 120)
	if _, err := vm.Start(ctx); !proxmox.IsNotAuthorized(err) {
		t.Fatalf("POST without CSRF token: %v", err)
	}

	// Password rotation: new logins need the new password.
	s.SetUserPassword("root@pam", "n3w")
	_, err = proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithCredentials(&proxmox.Credentials{Username: "root@pam", Password: "s3cret"})).Version(ctx)
	if !proxmox.IsNotAuthorized(err) {
		t.Fatalf("old password: %v", err)
	}
	if _, err := proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithCredentials(&proxmox.Credentials{Username: "root@pam", Password: "n3w"})).Version(ctx); err != nil {
		t.Fatalf("new password: %v", err)
	}
	// Issued tickets outlive a password change, until revoked.
	if _, err := ticket.Version(ctx); err != nil {
		t.Fatalf("existing ticket after password change: %v", err)
	}
	s.RevokeTickets()
	if _, err := ticket.Version(ctx); !proxmox.IsNotAuthorized(err) {
		t.Fatalf("revoked ticket: %v", err)
	}
}

// ---------------------------------------------------------------------------
// fault injection

func TestFaults(t *testing.T) {
	s := startSim(t, Options{})
	s.AddTemplate("pve1", 9000, "tmpl", nil)
	s.AddVM("pve1", 150, "vm", []string{"x"}, false)
	c := tokenClient(t, s)
	ctx := ctxT(t)
	n := mustNode(t, c, "pve1")
	vm := mustVM(t, n, 150)
	inject := func(f Fault) {
		t.Helper()
		if err := s.InjectFault(f); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("http 500 with message", func(t *testing.T) {
		inject(Fault{Operation: OpVersion, Action: FaultHTTPError, Status: 500, Message: "pveproxy exploded", Times: 1})
		_, err := c.Version(ctx)
		if err == nil || err.Error() != "500 pveproxy exploded" {
			t.Fatalf("err = %v", err)
		}
		if _, err := c.Version(ctx); err != nil {
			t.Fatalf("fault outlived Times: %v", err)
		}
	})
	t.Run("http 503 without body", func(t *testing.T) {
		inject(Fault{Method: "GET", Path: `^/nodes$`, Action: FaultHTTPError, Status: 503, Times: 1})
		if _, err := c.Nodes(ctx); err == nil {
			t.Fatal("503 went unnoticed")
		}
	})
	t.Run("http 401 and 403", func(t *testing.T) {
		inject(Fault{Operation: OpClusterResources, Action: FaultHTTPError, Status: 401, Times: 1})
		inject(Fault{Operation: OpClusterResources, Action: FaultHTTPError, Status: 403, Message: "Permission check failed (/, Sys.Audit)", Times: 1})
		cl := &proxmox.Cluster{}
		cl = cl.New(c)
		for i := 0; i < 2; i++ {
			if _, err := cl.Resources(ctx); !proxmox.IsNotAuthorized(err) {
				t.Fatalf("attempt %d: %v", i, err)
			}
		}
	})
	t.Run("delay", func(t *testing.T) {
		inject(Fault{Operation: OpClusterStatus, Action: FaultDelay, Delay: 300 * time.Millisecond, Times: 1})
		start := time.Now()
		if _, err := c.Cluster(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("answered after %s", d)
		}
	})
	t.Run("hang until the client gives up", func(t *testing.T) {
		inject(Fault{Operation: OpNodes, Action: FaultHang, Times: 1})
		hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Nodes(hctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("hung for %s", d)
		}
		if _, err := c.Nodes(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("drop the connection", func(t *testing.T) {
		inject(Fault{Operation: OpStart, Action: FaultDrop, Times: 1})
		if _, err := vm.Start(ctx); err == nil {
			t.Fatal("dropped connection went unnoticed")
		}
		if snap, _ := s.VM(150); snap.Status != "stopped" {
			t.Fatal("a dropped request took effect")
		}
		succeeds(t)(vm.Start(ctx))
		succeeds(t)(vm.Stop(ctx))
	})
	t.Run("task fails", func(t *testing.T) {
		inject(Fault{Operation: OpClone, Action: FaultTaskFail, Message: "clone failed: injected I/O error", Times: 1})
		_, task, err := mustVM(t, n, 9000).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 170})
		waitFailed(t, task, err, "clone failed: injected I/O error")
		if _, ok := s.VM(170); ok {
			t.Fatal("failed clone left its VM")
		}
	})
	t.Run("lock error", func(t *testing.T) {
		inject(Fault{Operation: OpConfigSet, Action: FaultLockError, Times: 1})
		err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "cores", Value: 4})
		if err == nil || err.Error() != "500 VM is locked (clone)" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("until cleared, matched by method", func(t *testing.T) {
		inject(Fault{Method: "POST", Path: `/qemu/150/status/`, Action: FaultHTTPError, Status: 500, Message: "busy"})
		for i := 0; i < 2; i++ {
			if _, err := vm.Start(ctx); err == nil || err.Error() != "500 busy" {
				t.Fatalf("attempt %d: %v", i, err)
			}
		}
		if err := vm.Ping(ctx); err != nil {
			t.Fatalf("a POST fault hit a GET: %v", err)
		}
		s.ClearFaults()
		if s.PendingFaults() != 0 {
			t.Fatal("faults left after ClearFaults")
		}
		succeeds(t)(vm.Start(ctx))
	})
	if err := s.InjectFault(Fault{Path: "("}); err == nil {
		t.Fatal("invalid path expression accepted")
	}
}

// ---------------------------------------------------------------------------
// storage

func TestStorageUpload(t *testing.T) {
	s := startSim(t, Options{})
	s.AddTemplate("pve1", 9000, "tmpl", nil)
	c := tokenClient(t, s)
	ctx := ctxT(t)
	n := mustNode(t, c, "pve1")
	local, err := n.Storage(ctx, "local")
	if err != nil {
		t.Fatal(err)
	}
	if local.Type != "dir" || !strings.Contains(local.Content, "snippets") {
		t.Fatalf("local = %+v", local)
	}

	// Snippets have no upload path in Proxmox.
	var upid proxmox.UPID
	data := "#cloud-config\n"
	err = c.UploadReader("/nodes/pve1/storage/local/upload", map[string]string{"content": "snippets"}, "user.yaml", strings.NewReader(data), int64(len(data)), &upid)
	wantErr(t, err, "bad request: 400 Parameter verification failed.")
	wantErr(t, err, "snippets")

	// ISO upload works, on file storage only, with the right extension.
	succeeds(t)(local.UploadString("iso", "user-data-100.iso", "not really an ISO"))
	iso, err := local.ISO(ctx, "user-data-100.iso")
	if err != nil {
		t.Fatal(err)
	}
	if iso.Size != 17 || iso.Path != "/var/lib/vz/template/iso/user-data-100.iso" {
		t.Fatalf("iso = %+v", iso)
	}
	content, err := local.GetContent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(content) != 1 || content[0].Volid != "local:iso/user-data-100.iso" || content[0].Format != "iso" {
		t.Fatalf("content = %+v", content)
	}
	_, err = local.UploadString("iso", "notes.txt", "x")
	wantErr(t, err, "wrong file extension")
	lvm, err := n.Storage(ctx, "local-lvm")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lvm.UploadString("iso", "x.iso", "x")
	wantErr(t, err, "500 can't upload to storage type 'lvmthin'")
	images, err := lvm.GetContent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(images) != 1 || images[0].Volid != "local-lvm:base-9000-disk-0" || images[0].VMID != 9000 || images[0].Size != 32<<30 {
		t.Fatalf("images = %+v", images)
	}

	// A checksum mismatch fails the import task.
	file := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(file, []byte("seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	task, err := local.UploadWithHash("iso", file, nil, strings.Repeat("0", 64), "sha256")
	waitFailed(t, task, err, "checksum mismatch")
	const seedSHA256 = "19b25856e1c150ca834cffc8b59b23adbd0ec0389e58eb22b3b64768098d002b"
	succeeds(t)(local.UploadWithHash("iso", file, nil, seedSHA256, "sha256"))

	// Delete the ISO again.
	succeeds(t)(iso.Delete(ctx))
	if _, err := local.ISO(ctx, "user-data-100.iso"); err == nil {
		t.Fatal("ISO still there after delete")
	}
}

// ---------------------------------------------------------------------------
// nodes, guests and plain VM creation

func TestNodeOfflineGuestShutdownAndCreate(t *testing.T) {
	s := startSim(t, Options{})
	s.AddVM("pve2", 200, "runner", []string{"hyperfleet"}, true)
	c := tokenClient(t, s)
	ctx := ctxT(t)

	s.SetNodeOnline("pve2", false)
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nodes[1].Node != "pve2" || nodes[1].Status != "offline" {
		t.Fatalf("pve2 = %+v", nodes[1])
	}
	if _, err := c.Node(ctx, "pve2"); err == nil {
		t.Fatal("an offline node answered")
	}
	cl, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cl.Resources(ctx, "vm")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Status != "unknown" {
		t.Fatalf("VM on offline node = %+v", rs[0])
	}
	s.SetNodeOnline("pve2", true)

	n2 := mustNode(t, c, "pve2")
	vm := mustVM(t, n2, 200)
	if !vm.IsRunning() {
		t.Fatalf("planted running VM is %q", vm.Status)
	}
	if ifs, err := vm.AgentGetNetworkIFaces(ctx); err != nil || len(ifs) != 1 || !strings.HasPrefix(ifs[0].IPAddresses[0].IPAddress, "10.") {
		t.Fatalf("agent of planted VM: %v %v", ifs, err)
	}
	s.GuestShutdown(200)
	if err := vm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if !vm.IsStopped() {
		t.Fatalf("after guest shutdown: %q", vm.Status)
	}

	// Plain creation and conversion to a template, then a linked clone.
	n1 := mustNode(t, c, "pve1")
	succeeds(t)(n1.NewVirtualMachine(ctx, 500,
		proxmox.VirtualMachineOption{Name: "name", Value: "built"},
		proxmox.VirtualMachineOption{Name: "scsi0", Value: "local-lvm:8"},
		proxmox.VirtualMachineOption{Name: "net0", Value: "virtio,bridge=vmbr0"},
		proxmox.VirtualMachineOption{Name: "boot", Value: "order=scsi0;net0"},
	))
	built := mustVM(t, n1, 500)
	if got := built.VirtualMachineConfig.SCSIs["scsi0"]; got != "local-lvm:vm-500-disk-0,size=8G" {
		t.Fatalf("allocated disk %q", got)
	}
	succeeds(t)(built.ConvertToTemplate(ctx))
	built = mustVM(t, n1, 500)
	if !bool(built.Template) || built.VirtualMachineConfig.SCSIs["scsi0"] != "local-lvm:base-500-disk-0,size=8G" {
		t.Fatalf("template: %v %q", built.Template, built.VirtualMachineConfig.SCSIs["scsi0"])
	}
	_, task, err := built.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 501, Name: "from-built"})
	waitOK(t, task, err)
	task, err = built.Start(ctx)
	waitFailed(t, task, err, "you can't start a vm if it's a template")
}

// ---------------------------------------------------------------------------
// shutdown hygiene

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()

	s := New(Options{Latencies: Latencies{API: time.Millisecond, Clone: time.Minute, Start: time.Millisecond, Boot: time.Minute}})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.AddTemplate("pve1", 9000, "tmpl", nil)
	s.AddVM("pve1", 150, "vm", nil, false)
	hc, tr := httpClientFor(t, s)
	id, secret := s.APIToken()
	c := proxmox.NewClient(s.URL(), proxmox.WithHTTPClient(hc), proxmox.WithAPIToken(id, secret))
	ctx := ctxT(t)
	n := mustNode(t, c, "pve1")
	if _, _, err := mustVM(t, n, 9000).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 160}); err != nil {
		t.Fatal(err) // leaves a clone timer pending for a minute
	}
	succeeds(t)(mustVM(t, n, 150).Start(ctx)) // leaves a boot timer pending
	if err := s.InjectFault(Fault{Operation: OpNodes, Action: FaultHang}); err != nil {
		t.Fatal(err)
	}
	hung := make(chan error, 1)
	go func() {
		_, err := c.Nodes(context.Background()) // no deadline: only Close can end it
		hung <- err
	}()
	eventually.True(t, 5*time.Second, "the hanging request to arrive", func() bool { return s.Stats()[OpNodes] > 0 })

	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case err := <-hung:
		if err == nil {
			t.Fatal("hung request succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hung request not ended by Close")
	}
	s.Close() // idempotent
	tr.CloseIdleConnections()
	eventually.True(t, 5*time.Second, "goroutines to drain", func() bool { return runtime.NumGoroutine() <= before })
}

// As on Proxmox VE, the clone call answers with its UPID before the
// temporary config exists: until the worker writes it, the VMID looks free
// to a read of the VM, to /cluster/nextid and to a second clone call, and
// running clone tasks are listed by /cluster/tasks and by a node's
// source=active listing.
func TestCloneConfigAppearsAfterTheLag(t *testing.T) {
	lat := DefaultLatencies()
	lat.CloneConfigLag = time.Hour // never within this test: the VMID stays free
	s := startSim(t, Options{Latencies: lat})
	s.AddTemplate("pve1", 9000, "ubuntu-2404", nil)
	c := tokenClient(t, s)
	ctx := context.Background()
	tmpl := mustVM(t, mustNode(t, c, "pve1"), 9000)
	_, _, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 300, Name: "lagging"})
	if err != nil {
		t.Fatal(err)
	}
	if vm, ok := s.VM(300); ok {
		t.Fatalf("the temporary config exists before the lag: %+v", vm)
	}
	var id any
	if err := c.Get(ctx, "/cluster/nextid?vmid=300", &id); err != nil {
		t.Fatalf("nextid during the lag: %v", err)
	}
	if _, _, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 300, Name: "twin"}); err != nil {
		t.Fatalf("a second clone during the lag is accepted by Proxmox, got %v", err)
	}
	cl, err := c.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := cl.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, task := range tasks {
		if task.Type == "qmclone" && task.Status == "" && task.EndTime.IsZero() {
			running++
		}
	}
	if running != 2 {
		t.Fatalf("/cluster/tasks shows %d running clones, want 2: %+v", running, tasks)
	}
	var active, archive []map[string]any
	if err := c.Get(ctx, "/nodes/pve1/tasks?source=active&typefilter=qmclone", &active); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "/nodes/pve1/tasks?typefilter=qmclone", &archive); err != nil {
		t.Fatal(err)
	}
	// A node's listing marks a running task "RUNNING" (pve-manager
	// PVE::API2::Tasks node_tasks), where /cluster/tasks leaves it out.
	if len(active) != 2 || len(archive) != 0 || active[0]["status"] != "RUNNING" {
		t.Fatalf("node tasks: active %v, archive (the default) %v", active, archive)
	}
}

// Two clones to one VMID: whichever reaches the config first makes the VM;
// the other is refused at the call (config file already exists) or fails
// in its worker (the VMID's lock, or the config the first one wrote). There
// is never a second VM.
func TestSecondCloneToOneVMIDFails(t *testing.T) {
	lat := DefaultLatencies()
	lat.CloneConfigLag = 20 * time.Millisecond
	s := startSim(t, Options{Latencies: lat})
	s.AddTemplate("pve1", 9000, "ubuntu-2404", nil)
	c := tokenClient(t, s)
	ctx := context.Background()
	tmpl := mustVM(t, mustNode(t, c, "pve1"), 9000)
	_, first, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 301, Name: "first"})
	if err != nil {
		t.Fatal(err)
	}
	_, second, err := tmpl.Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 301, Name: "second"})
	waitOK(t, first, nil)
	if err != nil {
		wantErr(t, err, "500 unable to create VM 301: config file already exists")
	} else {
		second = waitTask(t, second, nil)
		if !second.IsFailed || (!strings.Contains(second.ExitStatus, "lock-301.conf' - got timeout") &&
			!strings.Contains(second.ExitStatus, "config file already exists")) {
			t.Fatalf("second clone task: failed %v, exit %q", second.IsFailed, second.ExitStatus)
		}
	}
	if vm, ok := s.VM(301); !ok || vm.Name != "first" || vm.Lock != "" {
		t.Fatalf("VM 301 = %+v, want the first clone, unlocked", vm)
	}
}
