package proxmox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// pveTasks answers /cluster/tasks and /nodes/{node}/tasks with rows shaped
// and filtered the way Proxmox VE's own code does, independent of
// proxmoxsim, so the provider's task handling is held to Proxmox itself:
//
//   - a task's UPID carries the user it ran as, "root@pam!hyperfleet" for
//     an API token;
//   - /cluster/tasks converts every token task to user "root@pam", tokenid
//     "hyperfleet"; a running row has a pid and no status, an ended one a
//     status and no pid; no row has pstart (pve-manager PVE::API2::Cluster
//     tasks, pve-common PVE::RESTEnvironment::active_workers);
//   - a node's listing (pve-manager PVE::API2::Tasks node_tasks) gives a
//     running task (from the active-task file, not converted) the status
//     "RUNNING" and its whole token as user, and an archived one the
//     converted user and tokenid; userfilter is a case-insensitive
//     substring match on that user.
type pveTasks struct {
	mu    sync.Mutex
	tasks []*pveTask
}

type pveTask struct {
	node, typ, id, user string // user as in the UPID
	start               time.Time
	running             bool
	exit                string
	pid                 int
}

func (t *pveTask) upid() string {
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", t.node, t.pid, 4242, t.start.Unix(), t.typ, t.id, t.user)
}

func (t *pveTask) row(convert bool) map[string]any {
	m := map[string]any{"upid": t.upid(), "node": t.node, "starttime": t.start.Unix(), "type": t.typ, "id": t.id, "user": t.user}
	if user, token, ok := strings.Cut(t.user, "!"); ok && convert {
		m["user"], m["tokenid"] = user, token
	}
	return m
}

func (f *pveTasks) add(t *pveTask) *pveTask {
	f.mu.Lock()
	defer f.mu.Unlock()
	t.pid = 1000 + len(f.tasks)
	f.tasks = append(f.tasks, t)
	return t
}

func (f *pveTasks) end(t *pveTask, exit string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t.running, t.exit = false, exit
}

func (f *pveTasks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/api2/json")
	rows := []map[string]any{}
	switch {
	case path == "/cluster/tasks":
		for _, t := range f.tasks {
			m := t.row(true)
			if t.running {
				m["pid"], m["saved"] = t.pid, "0"
			} else {
				m["status"], m["endtime"], m["saved"] = t.exit, t.start.Unix()+5, "1"
			}
			rows = append(rows, m)
		}
	case regexp.MustCompile(`^/nodes/[^/]+/tasks$`).MatchString(path):
		node := strings.Split(path, "/")[2]
		q := r.URL.Query()
		filter := strings.ToLower(q.Get("userfilter"))
		for _, t := range f.tasks {
			if t.node != node || (q.Get("source") != "all" && q.Get("source") != "active" && t.running) {
				continue
			}
			m := t.row(!t.running)
			if filter != "" && !strings.Contains(strings.ToLower(m["user"].(string)), filter) {
				continue
			}
			m["pid"], m["pstart"] = t.pid, 4242
			if t.running {
				m["status"] = "RUNNING"
			} else {
				m["status"], m["endtime"] = t.exit, t.start.Unix()+5
			}
			rows = append(rows, m)
		}
	default:
		http.Error(w, "not here", http.StatusNotImplemented)
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": rows})
}

// pveProvider is a provider authenticating with API token
// root@pam!hyperfleet against h, its watchers driven by hand.
func pveProvider(t *testing.T, h http.Handler, tweak func(*Config)) *Provider {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := Config{Endpoint: srv.URL + "/api2/json", TokenID: "root@pam!hyperfleet", TokenSecret: "s3cret",
		RequestTimeout: 5 * time.Second, Installation: "inst-a", TaskPollInterval: time.Hour, TaskTimeout: time.Hour}
	if tweak != nil {
		tweak(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A clone started with the API token and still running when the operator
// restarts counts against the clone limit: /cluster/tasks lists it as user
// root@pam, tokenid hyperfleet, which is this provider's token.
func TestTokenCloneRunningAtRestartCountsAgainstTheLimit(t *testing.T) {
	f := &pveTasks{}
	now := time.Now()
	f.add(&pveTask{node: "pve1", typ: "qmclone", id: "9000", user: "root@pam!hyperfleet", start: now, running: true})
	// Neither the token's user's own clone nor another token's is ours.
	f.add(&pveTask{node: "pve1", typ: "qmclone", id: "9000", user: "root@pam", start: now, running: true})
	f.add(&pveTask{node: "pve1", typ: "qmclone", id: "9000", user: "root@pam!other", start: now, running: true})
	f.add(&pveTask{node: "pve1", typ: "qmclone", id: "9000", user: "root@pam!hyperfleet", start: now, exit: "OK"})
	p := pveProvider(t, f, nil)
	if err := p.syncAdmission(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := p.admission.inFlight(); n != 1 {
		t.Fatalf("clones counted after the restart = %d, want 1 (the token's running clone)", n)
	}
	if p.admission.tryAcquire(100300, "pve1", "template-pve1") && p.admission.tryAcquire(100301, "pve1", "template-pve1") {
		t.Fatal("the running clone does not count against pve1's limit of 2")
	}
}

// A running clone that a node's listing shows as "RUNNING" (source=all) is
// running: not a task that ended with the exit status RUNNING.
func TestRunningCloneListedRUNNINGIsNotFailed(t *testing.T) {
	f := &pveTasks{}
	task := f.add(&pveTask{node: "pve1", typ: "qmclone", id: "9000", user: "root@pam!hyperfleet", start: time.Now(), running: true})
	p := pveProvider(t, f, nil)
	p.watch(100310, "Clone", &proxmox.Task{UPID: proxmox.UPID(task.upid()), Node: "pve1"}, providers.Owner{UID: "u1"})
	p.pollNode("pve1")
	if _, busy := p.pending(100310); !busy {
		err := p.taskError(context.Background(), 100310)
		t.Fatalf("a clone listed RUNNING counts as ended (%v)", err)
	}
	f.end(task, "OK")
	p.pollNode("pve1")
	if _, busy := p.pending(100310); busy {
		t.Fatal("the clone's end was not seen")
	}
	if err := p.taskError(context.Background(), 100310); err != nil {
		t.Fatalf("a clone that ended OK = %v", err)
	}
}

// A clone started with the API token is seen to end through the node's
// task listing: once Proxmox archives it, it is listed under the token's
// user with the token name apart, and a userfilter naming the whole token
// would hide it.
func TestFinishedTokenCloneSeenThroughTheNodeListing(t *testing.T) {
	p, _ := tokenCloneEnded(t, 100320, "clone failed: storage full")
	var tr *providers.TransientError
	if err := p.taskError(context.Background(), 100320); !errors.As(err, &tr) || tr.Reason != "CloneFailed" || !strings.Contains(err.Error(), "storage full") {
		t.Fatalf("taskError = %v, want CloneFailed with Proxmox's exit status", err)
	}
}

// "WARNINGS: <n>" is a success (pve-common PVE::UPID::status_is_error): the
// machine moves on, and the warning is surfaced once.
func TestWarningsIsSuccess(t *testing.T) {
	p, upid := tokenCloneEnded(t, 100330, "WARNINGS: 1")
	if err := p.taskError(context.Background(), 100330); err != nil {
		t.Fatalf("a clone that ended with WARNINGS: 1 = %v, want success", err)
	}
	w := p.taskWarnings(100330)
	if len(w) != 1 || !strings.Contains(w[0], "warnings: 1") || !strings.Contains(w[0], upid) {
		t.Fatalf("warnings = %q", w)
	}
	if again := p.taskWarnings(100330); len(again) != 0 {
		t.Fatalf("warnings surfaced twice: %q", again)
	}
	for _, exit := range []string{"OK", "WARNINGS: 12"} {
		if !succeeded(exit) {
			t.Errorf("%q is not a success", exit)
		}
	}
	for _, exit := range []string{"RUNNING", "WARNINGS", "WARNINGS: x", "unexpected status", "", "clone failed: WARNINGS: 1"} {
		if succeeded(exit) {
			t.Errorf("%q is a success", exit)
		}
	}
}

// tokenCloneEnded is a provider that watched a clone started with the API
// token into vmid, which then ended with status and was seen to end through
// the node's task listing; and the task's UPID.
func tokenCloneEnded(t *testing.T, vmid int, status string) (*Provider, string) {
	t.Helper()
	f := &pveTasks{}
	task := f.add(&pveTask{node: "pve1", typ: "qmclone", id: "9000", user: "root@pam!hyperfleet", start: time.Now(), running: true})
	p := pveProvider(t, f, nil)
	p.watch(vmid, "Clone", &proxmox.Task{UPID: proxmox.UPID(task.upid()), Node: "pve1"}, providers.Owner{UID: "u1"})
	f.end(task, status)
	p.pollNode("pve1")
	if _, busy := p.pending(vmid); busy {
		t.Fatalf("the clone that ended %q was not seen in the node's listing", status)
	}
	return p, task.upid()
}
