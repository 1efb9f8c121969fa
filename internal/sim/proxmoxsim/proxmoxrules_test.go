package proxmoxsim

import (
	"testing"
	"time"
)

// Tags are rewritten on every write as Proxmox does: lower case, each once
// ignoring case, sorted — or kept in the order written when the
// datacenter's tag-style ordering is "config"; case kept when
// case-sensitive.
func TestTagsAreNormalisedAsProxmoxDoes(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"default: sorted, lower case", Options{}, "a-team;hf-owner-x;hyperfleet;zeta"},
		{"ordering config: as written", Options{TagOrdering: TagOrderingConfig}, "zeta;hyperfleet;a-team;hf-owner-x"},
		// Case-sensitive keeps A-Team and HYPERFLEET apart, and sorts
		// upper case first, as Perl's cmp does.
		{"case-sensitive", Options{TagCaseSensitive: true}, "A-Team;HYPERFLEET;Zeta;hf-owner-x;hyperfleet;zeta"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startSim(t, tc.opts)
			s.AddVM("pve1", 150, "tagged", nil, false)
			c := tokenClient(t, s)
			if err := c.Put(ctxT(t), "/nodes/pve1/qemu/150/config", map[string]string{"tags": "Zeta;hyperfleet,A-Team zeta;hf-owner-x;HYPERFLEET"}, nil); err != nil {
				t.Fatal(err)
			}
			var cfg map[string]any
			if err := c.Get(ctxT(t), "/nodes/pve1/qemu/150/config", &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg["tags"] != tc.want {
				t.Fatalf("tags = %v, want %s", cfg["tags"], tc.want)
			}
		})
	}
}

// A description reads back without trailing whitespace, as Proxmox parses
// its config file.
func TestDescriptionLosesTrailingWhitespace(t *testing.T) {
	s := startSim(t, Options{})
	s.AddVM("pve1", 150, "described", nil, false)
	c := tokenClient(t, s)
	if err := c.Put(ctxT(t), "/nodes/pve1/qemu/150/config", map[string]string{"description": "line one\nline two \n\n"}, nil); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := c.Get(ctxT(t), "/nodes/pve1/qemu/150/config", &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["description"] != "line one\nline two" {
		t.Fatalf("description = %q", cfg["description"])
	}
}

// A token's tasks are listed as Proxmox lists them: archived ones under the
// token's user with the token name apart, so a userfilter naming the whole
// token finds only running ones, and one naming the user finds both.
func TestTokenTasksAreListedAsProxmoxDoes(t *testing.T) {
	lat := DefaultLatencies()
	lat.Start = time.Hour
	s := startSim(t, Options{Latencies: lat})
	s.AddVM("pve1", 150, "stopping", nil, true)
	s.AddVM("pve1", 151, "starting", nil, false)
	c := tokenClient(t, s)
	var upid string
	if err := c.Post(ctxT(t), "/nodes/pve1/qemu/150/status/stop", nil, &upid); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if tasks := s.Tasks(); len(tasks) == 1 && !tasks[0].Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stop did not end")
		}
	}
	if err := c.Post(ctxT(t), "/nodes/pve1/qemu/151/status/start", nil, &upid); err != nil {
		t.Fatal(err)
	}
	list := func(filter string) []map[string]any {
		var rows []map[string]any
		if err := c.Get(ctxT(t), "/nodes/pve1/tasks?source=all&userfilter="+filter, &rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	if rows := list("ROOT@pam"); len(rows) != 2 {
		t.Fatalf("userfilter on the user: %v, want both tasks", rows)
	}
	rows := list("root@pam!hyperfleet")
	if len(rows) != 1 || rows[0]["status"] != "RUNNING" || rows[0]["user"] != "root@pam!hyperfleet" || rows[0]["tokenid"] != nil {
		t.Fatalf("userfilter on the whole token: %v, want only the running task, its user the whole token", rows)
	}
	ended := list("root@pam")[1]
	if ended["user"] != "root@pam" || ended["tokenid"] != "hyperfleet" || ended["status"] != "OK" {
		t.Fatalf("archived token task row = %v", ended)
	}
	var status map[string]any
	if err := c.Get(ctxT(t), "/nodes/pve1/tasks/"+ended["upid"].(string)+"/status", &status); err != nil {
		t.Fatal(err)
	}
	if status["user"] != "root@pam" || status["tokenid"] != "hyperfleet" || status["exitstatus"] != "OK" {
		t.Fatalf("task status = %v", status)
	}
}
