package proxmox

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// watchedTask is a task this provider started for a VM. Whether it ended is
// learnt by the node's watcher (taskwatch.go), never by asking per task.
type watchedTask struct {
	kind    string
	upid    string
	node    string
	owner   providers.Owner
	started time.Time
	// Set by the watcher once the task ended: its exit status ("OK", or
	// "WARNINGS: <n>", for success), or timedOut when it ran, or could not be read, past
	// TaskTimeout.
	ended    bool
	exit     string
	timedOut bool
}

// watch remembers a task this provider started for vmid on behalf of
// owner, and makes sure its node is watched.
func (p *Provider) watch(vmid int, kind string, task *proxmox.Task, owner providers.Owner) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tasks[vmid] = &watchedTask{kind: kind, upid: string(task.UPID), node: task.Node, owner: owner, started: p.now()}
	p.ensureWatcher(task.Node)
}

// pending reports whether vmid has a task of this provider not yet seen
// ended.
func (p *Provider) pending(vmid int) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tasks[vmid]
	if !ok || t.ended {
		return "", false
	}
	return t.kind, true
}

// taskError reports on vmid's watched task once its node's watcher saw it
// end, and forgets it: nil for success (one with warnings was noted for
// taskWarnings when it ended), an error carrying Proxmox's exit
// status for a failure, TaskTimedOut for one that ran (or could not be
// read) past TaskTimeout. A task still running is nil too: pending says so.
func (p *Provider) taskError(_ context.Context, vmid int) error {
	p.mu.Lock()
	t, ok := p.tasks[vmid]
	if !ok || !t.ended {
		p.mu.Unlock()
		return nil
	}
	done := *t
	delete(p.tasks, vmid)
	p.mu.Unlock()
	p.admission.release(vmid)
	switch {
	case done.timedOut:
		return providers.Transient("TaskTimedOut", 30*time.Second,
			fmt.Errorf("the %s task of VM %d did not end, or could not be read, within %s (task %s)", done.kind, vmid, p.cfg.TaskTimeout, done.upid))
	case !succeeded(done.exit):
		return providers.Transient(done.kind+"Failed", 10*time.Second,
			fmt.Errorf("the %s task of VM %d failed: %s", done.kind, vmid, done.exit))
	}
	return nil
}

// noteWarnings keeps, for taskWarnings, that t (vmid's) succeeded with
// warnings. It is noted when the watcher sees the task end, not when the
// task is reported: a caller may move on (start the VM, watching its next
// task) before it asks. The caller holds p.mu.
func (p *Provider) noteWarnings(vmid int, t *watchedTask) {
	if !warnings(t.exit) {
		return
	}
	p.warned[vmid] = append(p.warned[vmid], fmt.Sprintf("the %s task of VM %d succeeded with %s (task %s): see its log on node %s",
		t.kind, vmid, strings.ToLower(t.exit), t.upid, t.node))
}

// taskWarnings returns, once, what vmid's ended tasks warned about.
func (p *Provider) taskWarnings(vmid int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.warned[vmid]
	delete(p.warned, vmid)
	return w
}

// syncAdmission counts, in admission, the clones running on Proxmox under
// this provider's user that it did not start itself: those of an earlier
// process (before a restart or a failover) or of the provider this one
// replaced (a HypervisorCluster's spec or Secret changed). It lists
// /cluster/tasks, which holds every node's running tasks (a running one has
// no end time and no exit status), once, before the first clone; from then
// on each such clone's node is watched like our own tasks, and its slot
// given back when the node's listing shows it ended or it passes
// TaskTimeout. Until the listing succeeds no clone starts: starting one
// blind could break the limits.
func (p *Provider) syncAdmission(ctx context.Context) error {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	if !p.syncedAt.IsZero() {
		return nil
	}
	var tasks []*taskRow
	if err := p.client.Get(ctx, "/cluster/tasks", &tasks); err != nil {
		return classify("listing Proxmox's running tasks to count clones in progress", err)
	}
	ours := map[string]bool{}
	p.mu.Lock()
	for _, t := range p.tasks {
		ours[t.upid] = true
	}
	p.mu.Unlock()
	running := map[string]slot{}
	for _, t := range tasks {
		if t == nil || t.Type != "qmclone" || !p.mine(t) || ours[t.UPID] || !t.running() {
			continue
		}
		if start := t.started(); !start.IsZero() && p.now().Sub(start) > p.cfg.TaskTimeout {
			continue
		}
		// The task runs on the template's node; a linked clone (the usual
		// kind) counts against that node and its template storage, as
		// place does. A full clone's target storage and a clone's target
		// node are not in the listing, so they count the same way.
		running[t.UPID] = slot{node: t.Node, storage: "template-" + t.Node}
	}
	p.admission.restore(running)
	p.mu.Lock()
	for _, s := range running {
		p.ensureWatcher(s.node)
	}
	p.mu.Unlock()
	p.syncedAt = p.now()
	return nil
}

// user is the Proxmox user (or API token) the provider's tasks run as, as
// it appears in their UPIDs: "user@realm", or "user@realm!token".
func (p *Provider) user() string {
	if p.cfg.TokenID != "" {
		return p.cfg.TokenID
	}
	return p.cfg.Username
}

// splitUser splits the user tasks run as into the user and the token name
// ("" for a user logged in with a password), as Proxmox lists them.
func (p *Provider) splitUser() (user, token string) {
	user, token, _ = strings.Cut(p.user(), "!")
	return user, token
}

// taskRow is one row of Proxmox's task listings (/cluster/tasks,
// /nodes/{node}/tasks). go-proxmox's Task is not used for them: it has no
// tokenid, and it cannot read every field as Proxmox sends it ("saved" is a
// string or a number, depending on whether the row was just archived).
type taskRow struct {
	UPID string `json:"upid"`
	Node string `json:"node"`
	Type string `json:"type"`
	ID   string `json:"id"`
	// User and TokenID: a task started by API token "root@pam!hyperfleet"
	// is listed as user "root@pam", tokenid "hyperfleet" once Proxmox
	// archived it (pve-manager PVE::API2::Tasks $convert_token_task, and
	// PVE::API2::Cluster's tasks), but while it runs a node's listing
	// shows the whole token as user, with no tokenid (its active-task rows
	// skip the conversion).
	User    string `json:"user"`
	TokenID string `json:"tokenid"`
	// Status is the exit status of an ended task; for a running one it is
	// absent (/cluster/tasks), "RUNNING" (a node's listing with
	// source=active or all) or, in some recordings, "running".
	Status    string   `json:"status"`
	StartTime flexUnix `json:"starttime"`
	EndTime   flexUnix `json:"endtime"`
}

// mine reports whether the row is a task of this provider's user: the same
// user and the same token (none, for a password login), in either way
// Proxmox writes a token's tasks. A user's own tasks and another token's of
// the same user are not.
func (p *Provider) mine(t *taskRow) bool {
	user, token := p.splitUser()
	rowUser, rowToken := t.User, t.TokenID
	if rowToken == "" {
		rowUser, rowToken, _ = strings.Cut(rowUser, "!")
	}
	return rowUser == user && rowToken == token
}

// running reports a task that has not ended, in every way Proxmox says so.
func (t *taskRow) running() bool {
	return t.EndTime == 0 && (t.Status == "" || strings.EqualFold(t.Status, "running"))
}

func (t *taskRow) started() time.Time {
	if t.StartTime == 0 {
		return time.Time{}
	}
	return time.Unix(int64(t.StartTime), 0)
}

// succeeded reports whether an ended task's exit status is a success:
// "OK", or "WARNINGS: <n>" (the task finished and logged warnings), as
// pve-common's PVE::UPID::status_is_error decides.
func succeeded(exit string) bool {
	return exit == "OK" || warnings(exit)
}

var warningsStatus = regexp.MustCompile(`^WARNINGS: \d+$`)

// warnings reports the exit status of a task that succeeded with warnings.
func warnings(exit string) bool { return warningsStatus.MatchString(exit) }

// flexUnix is a UNIX time Proxmox sends as a number, or (from some
// versions and paths) as a string of digits.
type flexUnix int64

func (f *flexUnix) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*f = 0
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("task time %s: %w", b, err)
	}
	*f = flexUnix(v)
	return nil
}
