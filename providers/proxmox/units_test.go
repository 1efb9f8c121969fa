package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// The ownership rule: the owner's UID, and this installation's mark or
// none (a VM made before installations); another installation's VM is
// never ours, nor listed.
func TestOwnership(t *testing.T) {
	const us, them = "prod-1", "dev-1"
	owner := providers.Owner{UID: "0F3A9C2E-1111-2222-3333-444455556666", Namespace: "ci", Name: "runner-1"}
	desc := description(owner, us)
	legacyDesc := "Managed by HyperFleet.\nhyperfleet-owner-uid: " + owner.UID + "\n"
	cases := []struct {
		name    string
		tags    []string
		desc    string
		want    bool
		foreign bool
	}{
		{"owner and installation tags", []string{"hyperfleet", ownerTag(owner.UID), installationTag(us)}, "", true, false},
		{"description only (mid-clone, before tags)", nil, desc, true, false},
		{"made before installations: owner tag, no mark", []string{"hyperfleet", ownerTag(owner.UID)}, legacyDesc, true, false},
		{"made before installations, mid-clone", nil, legacyDesc, true, false},
		{"another installation's tag", []string{"hyperfleet", ownerTag(owner.UID), installationTag(them)}, "", false, true},
		{"another installation's description", nil, description(owner, them), false, true},
		// A tag and a description line naming different owners: which is
		// true cannot be told, so the VM is nobody's, and never touched.
		{"another claim's tag", []string{"hyperfleet", ownerTag("99999999-1111-2222-3333-444455556666"), installationTag(us)}, desc, false, true},
		{"untagged foreign VM", []string{"prod", "db"}, "the production database", false, false},
		{"look-alike description", nil, "notes: hyperfleet-owner-uid is set by the operator", false, false},
		{"look-alike installation line", nil, legacyDesc + "see hyperfleet-installation: dev-1 for details", true, false},
	}
	for _, tc := range cases {
		if got := ownedBy(tc.tags, tc.desc, owner, us); got != tc.want {
			t.Errorf("%s: ownedBy = %v, want %v", tc.name, got, tc.want)
		}
		if got := foreign(tc.tags, tc.desc, us); got != tc.foreign {
			t.Errorf("%s: foreign = %v, want %v", tc.name, got, tc.foreign)
		}
	}
	if got := joinTags([]string{"HyperFleet", "a", " a", "", "b"}); got != "hyperfleet;a;b" {
		t.Errorf("joinTags = %q", got)
	}
	if got := splitTags("a;b,c d"); strings.Join(got, "|") != "a|b|c|d" {
		t.Errorf("splitTags = %q", got)
	}
}

func TestAdmission(t *testing.T) {
	a := newAdmission(2, 3)
	if !a.tryAcquire(100, "pve1", "local-lvm") || !a.tryAcquire(101, "pve1", "local-lvm") {
		t.Fatal("the first two clones on a node must be admitted")
	}
	if !a.tryAcquire(100, "pve1", "local-lvm") {
		t.Error("re-acquiring a held slot must succeed (a retried Create)")
	}
	if a.tryAcquire(102, "pve1", "local-lvm") {
		t.Error("a third clone on pve1 must queue (per-node limit 2)")
	}
	if !a.tryAcquire(102, "pve2", "local-lvm") {
		t.Error("pve2 has room")
	}
	if a.tryAcquire(103, "pve3", "local-lvm") {
		t.Error("a fourth clone into local-lvm must queue (per-storage limit 3)")
	}
	a.release(100)
	a.release(100) // releasing twice is harmless
	if !a.tryAcquire(103, "pve1", "local-lvm") || a.inFlight() != 3 {
		t.Errorf("after a release a queued clone runs; in flight = %d", a.inFlight())
	}
}

func resources() proxmox.ClusterResources {
	return proxmox.ClusterResources{
		{Type: "node", Node: "pve1", Status: "online", MaxMem: 64 << 30, Mem: 60 << 30},
		{Type: "node", Node: "pve2", Status: "online", MaxMem: 64 << 30, Mem: 8 << 30},
		{Type: "node", Node: "pve3", Status: "offline", MaxMem: 128 << 30},
		{Type: "qemu", Node: "pve1", VMID: 9000, Name: "ubuntu", Template: 1},
		{Type: "qemu", Node: "pve2", VMID: 9001, Name: "dup", Template: 1},
		{Type: "qemu", Node: "pve1", VMID: 9002, Name: "dup", Template: 1},
		{Type: "qemu", Node: "pve1", VMID: 200, Name: "not-a-template"},
		{Type: "storage", Node: "pve1", Storage: "local-lvm", Content: "images,rootdir"},
	}
}

func TestResolveTemplate(t *testing.T) {
	cases := []struct {
		src        providers.ProxmoxSpec
		wantVMID   uint64
		wantReason string
	}{
		{providers.ProxmoxSpec{SourceVMID: 9000}, 9000, ""},
		{providers.ProxmoxSpec{SourceName: "ubuntu"}, 9000, ""},
		{providers.ProxmoxSpec{SourceName: "dup"}, 0, "TemplateAmbiguous"},
		{providers.ProxmoxSpec{SourceVMID: 4242}, 0, "TemplateNotFound"},
		{providers.ProxmoxSpec{SourceVMID: 200}, 0, "SourceNotATemplate"},
	}
	for _, tc := range cases {
		got, err := resolveTemplate(resources(), &tc.src)
		if tc.wantReason != "" {
			if p, ok := providers.IsPermanent(err); !ok || p.Reason != tc.wantReason {
				t.Errorf("%+v: error %v, want permanent %s", tc.src, err, tc.wantReason)
			}
			continue
		}
		if err != nil || got.VMID != tc.wantVMID {
			t.Errorf("%+v: got %v, %v; want VMID %d", tc.src, got, err, tc.wantVMID)
		}
	}
}

func TestPlacement(t *testing.T) {
	p := &Provider{admission: newAdmission(1, 10)}
	rs := resources()
	src := rs[3] // template 9000 on pve1, local (not shared) storage
	// A linked clone on local storage can only go to the template's node.
	node, _, err := p.place(rs, src, &providers.ProxmoxSpec{}, "", 0)
	if err != nil || node != "pve1" {
		t.Errorf("linked clone placed on %q (%v), want the template's node pve1", node, err)
	}
	// A full clone from local storage must stay on the template's node too.
	node, _, err = p.place(rs, src, &providers.ProxmoxSpec{FullClone: true}, "local-lvm", 0)
	if err != nil || node != "pve1" {
		t.Errorf("full clone from local storage placed on %q (%v), want pve1", node, err)
	}
	// From shared storage, a clone goes where memory is freest: pve2 (56 GiB
	// free) over pve1 (4 GiB); pve3 is offline.
	rs = append(rs, &proxmox.ClusterResource{Type: "storage", Node: "pve1", Storage: "ceph", Content: "images", Shared: 1})
	node, _, err = p.place(rs, src, &providers.ProxmoxSpec{FullClone: true}, "ceph", 0)
	if err != nil || node != "pve2" {
		t.Errorf("clone from shared storage placed on %q (%v), want pve2", node, err)
	}
	// With pve2's clone slot taken, the next one goes to pve1.
	p.admission.tryAcquire(500, "pve2", "ceph")
	node, _, _ = p.place(rs, src, &providers.ProxmoxSpec{FullClone: true}, "ceph", 0)
	if node != "pve1" {
		t.Errorf("with pve2 busy, placed on %q, want pve1", node)
	}
	// Allowed nodes that are all offline: a transient error that names the problem.
	_, _, err = p.place(rs, src, &providers.ProxmoxSpec{FullClone: true, Nodes: []string{"pve3"}}, "local-lvm", 0)
	if !strings.Contains(fmt.Sprint(err), "no allowed Proxmox node is online") {
		t.Errorf("offline-only placement: %v", err)
	}
}

func TestDiskSizes(t *testing.T) {
	cases := map[string]int64{
		"local-lvm:vm-100-disk-0,size=10G":           10,
		"local-lvm:vm-100-disk-0,iothread=1,size=2T": 2048,
		"local:100/vm-100-disk-0.qcow2,size=512M":    0,
		"local-lvm:vm-100-disk-0,size=42949672960":   40,
		"local-lvm:vm-100-disk-0":                    0,
	}
	for in, want := range cases {
		if got := sizeGiB(in); got != want {
			t.Errorf("sizeGiB(%q) = %d, want %d", in, got, want)
		}
	}
	if got := withoutDevice("order=scsi0;ide2;net0", "ide2"); got != "order=scsi0;net0" {
		t.Errorf("withoutDevice = %q", got)
	}
}

func TestNetworkSettings(t *testing.T) {
	cfg := Config{DefaultBridge: "vmbr0", Nameservers: []string{"10.0.0.1"}, SearchDomain: "lab"}
	if got := net0(providers.NetworkSpec{VLAN: 20}, cfg); got != "virtio,bridge=vmbr0,tag=20" {
		t.Errorf("net0 = %q", got)
	}
	if got := ipconfig(providers.NetworkSpec{IPv4CIDR: "10.0.20.11/24", Gateway: "10.0.20.1"}); got != "ip=10.0.20.11/24,gw=10.0.20.1" {
		t.Errorf("ipconfig = %q", got)
	}
	if got := ipconfig(providers.NetworkSpec{}); got != "ip=dhcp" {
		t.Errorf("ipconfig = %q", got)
	}
	nc := networkConfig(providers.NetworkSpec{IPv4CIDR: "10.0.20.11/24", Gateway: "10.0.20.1"}, cfg)
	for _, want := range []string{`addresses: ["10.0.20.11/24"]`, "via: 10.0.20.1", "addresses: [10.0.0.1]", "search: [lab]"} {
		if !strings.Contains(nc, want) {
			t.Errorf("network config lacks %q:\n%s", want, nc)
		}
	}
	// Without custom user data, Proxmox's own cloud-init fields carry user and keys.
	opts := settings(providers.MachineSpec{CloudInit: providers.CloudInitSpec{User: "ubuntu", SSHAuthorizedKeys: []string{"ssh-ed25519 AAA x"}}}, cfg)
	names := map[string]bool{}
	for _, o := range opts {
		names[o.Name] = true
	}
	for _, k := range []string{"ciuser", "sshkeys", "ipconfig0", "nameserver", "searchdomain", "net0"} {
		if !names[k] {
			t.Errorf("settings lack %s: %+v", k, opts)
		}
	}
	// With custom user data, they do not (the ISO carries everything).
	opts = settings(providers.MachineSpec{CloudInit: providers.CloudInitSpec{User: "ubuntu", UserData: "#cloud-config\n"}}, cfg)
	for _, o := range opts {
		if o.Name == "ciuser" || o.Name == "ipconfig0" {
			t.Errorf("with user data, %s must not be set", o.Name)
		}
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err       error
		sentinel  error
		permanent string
		transient string
	}{
		{proxmox.ErrNotAuthorized, nil, "AuthenticationFailed", ""},
		{errors.New("500 Configuration file 'nodes/pve1/qemu-server/105.conf' does not exist"), providers.ErrNotFound, "", ""},
		// Only the clone call turns "already exists" into ErrNameTaken (clone's
		// vmidTaken); from any other step it is an ordinary server error.
		{errors.New("500 unable to create VM 105: config file already exists"), nil, "", "HypervisorError"},
		{errors.New("500 VM is locked (clone)"), nil, "", "HypervisorBusy"},
		{errors.New("500 can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"), nil, "", "HypervisorBusy"},
		{&url.Error{Op: "Get", URL: "https://pve", Err: context.DeadlineExceeded}, nil, "", "HypervisorUnreachable"},
		{errors.New("503 Service Unavailable"), nil, "", "HypervisorError"},
		{errors.New("bad request: 400 Parameter verification failed. - {\"memory\":\"value must be at least 16\"}"), nil, "RequestRejected", ""},
	}
	for _, tc := range cases {
		err := classify("testing", tc.err)
		switch {
		case tc.sentinel != nil && !errors.Is(err, tc.sentinel):
			t.Errorf("%v: got %v, want it to wrap %v", tc.err, err, tc.sentinel)
		case tc.permanent != "":
			if p, ok := providers.IsPermanent(err); !ok || p.Reason != tc.permanent {
				t.Errorf("%v: got %v, want permanent %s", tc.err, err, tc.permanent)
			}
		case tc.transient != "":
			var tr *providers.TransientError
			if !errors.As(err, &tr) || tr.Reason != tc.transient || providers.RetryAfter(err) == 0 {
				t.Errorf("%v: got %v, want transient %s with a retry hint", tc.err, err, tc.transient)
			}
		}
	}
}

func TestOperationNames(t *testing.T) {
	cases := map[string]string{
		"GET /api2/json/version":                                  "version",
		"POST /api2/json/nodes/pve1/qemu/9000/clone":              "vm_clone",
		"GET /api2/json/nodes/pve1/qemu/105/status/current":       "vm_status",
		"POST /api2/json/nodes/pve1/qemu/105/status/start":        "vm_power",
		"DELETE /api2/json/nodes/pve1/qemu/105":                   "vm_delete",
		"GET /api2/json/nodes/pve1/tasks/UPID:pve1:0001:x/status": "task_status",
		"POST /api2/json/nodes/pve1/storage/local/upload":         "storage_upload",
		"GET /api2/json/cluster/resources":                        "cluster_resources",
		"GET /api2/json/cluster/tasks":                            "cluster_tasks",
		"GET /api2/json/somewhere/else":                           "other",
	}
	for in, want := range cases {
		method, path, _ := strings.Cut(in, " ")
		req, _ := http.NewRequest(method, "https://pve:8006"+path, nil)
		if got := operation(req); got != want {
			t.Errorf("operation(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestNewRejectsIncompleteCredentials(t *testing.T) {
	cases := []struct {
		cfg    Config
		reason string
	}{
		{Config{}, "InvalidEndpoint"},
		{Config{Endpoint: "https://pve", TokenID: "a@pam!b"}, "CredentialsIncomplete"},
		{Config{Endpoint: "https://pve", Username: "root@pam"}, "CredentialsIncomplete"},
		{Config{Endpoint: "https://pve", TokenID: "a@pam!b", TokenSecret: "s", Installation: "prod", CAPEM: []byte("not pem")}, "InvalidCABundle"},
		{Config{Endpoint: "https://pve", TokenID: "a@pam!b", TokenSecret: "s"}, "InvalidInstallation"},
		{Config{Endpoint: "https://pve", TokenID: "a@pam!b", TokenSecret: "s", Installation: "Prod_1"}, "InvalidInstallation"},
	}
	for _, tc := range cases {
		_, err := New(tc.cfg)
		if p, ok := providers.IsPermanent(err); !ok || p.Reason != tc.reason {
			t.Errorf("New(%+v): %v, want %s", tc.cfg, err, tc.reason)
		}
		if err != nil && strings.Contains(err.Error(), "s\"") {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
}

// A cloud-init ISO's name says whose it is; one made before installations
// is recognised with no installation; anything else is not ours.
func TestISONames(t *testing.T) {
	if got := isoName("prod-1", 4242); got != "hf-cloudinit-prod-1-4242.iso" {
		t.Errorf("isoName = %q", got)
	}
	cases := []struct {
		name string
		inst string
		vmid int
		ok   bool
	}{
		{"hf-cloudinit-prod-1-4242.iso", "prod-1", 4242, true},
		{"hf-cloudinit-0b6c7c2e-5f1d-4d8e-9a55-3f0c1e2d4b6a-100.iso", "0b6c7c2e-5f1d-4d8e-9a55-3f0c1e2d4b6a", 100, true},
		{"user-data-4242.iso", "", 4242, true},
		{"hf-cloudinit-4242.iso", "", 0, false},
		{"hf-cloudinit-Prod-4242.iso", "", 0, false},
		{"hf-cloudinit-prod-99.iso", "", 0, false},
		{"hf-cloudinit-prod-x.iso", "", 0, false},
		{"ubuntu-24.04-live-server-amd64.iso", "", 0, false},
		{"user-data-4242.iso.bak", "", 0, false},
	}
	for _, tc := range cases {
		inst, vmid, ok := parseISO(tc.name)
		if inst != tc.inst || vmid != tc.vmid || ok != tc.ok {
			t.Errorf("parseISO(%q) = %q, %d, %v; want %q, %d, %v", tc.name, inst, vmid, ok, tc.inst, tc.vmid, tc.ok)
		}
	}
}

func TestInstallationIDs(t *testing.T) {
	for _, id := range []string{"prod", "a", "0b6c7c2e-5f1d-4d8e-9a55-3f0c1e2d4b6a", strings.Repeat("a", 63)} {
		if err := providers.ValidateInstallation(id); err != nil {
			t.Errorf("%q refused: %v", id, err)
		}
	}
	for _, id := range []string{"", "Prod", "-prod", "prod-", "prod_1", "prod.1", strings.Repeat("a", 64)} {
		if err := providers.ValidateInstallation(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
}
