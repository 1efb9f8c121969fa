package proxmox

import (
	"context"
	"fmt"
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
	// Set by the watcher once the task ended: its exit status ("OK" for
	// success), or timedOut when it ran, or could not be read, past
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
// end, and forgets it: nil for success, an error carrying Proxmox's exit
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
	case done.exit != "OK":
		return providers.Transient(done.kind+"Failed", 10*time.Second,
			fmt.Errorf("the %s task of VM %d failed: %s", done.kind, vmid, done.exit))
	}
	return nil
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
	var tasks []*proxmox.Task
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
		if t == nil || t.Type != "qmclone" || t.User != p.user() || ours[string(t.UPID)] ||
			!t.EndTime.IsZero() || (t.Status != "" && t.Status != "running") {
			continue
		}
		if !t.StartTime.IsZero() && p.now().Sub(t.StartTime) > p.cfg.TaskTimeout {
			continue
		}
		// The task runs on the template's node; a linked clone (the usual
		// kind) counts against that node and its template storage, as
		// place does. A full clone's target storage and a clone's target
		// node are not in the listing, so they count the same way.
		running[string(t.UPID)] = slot{node: t.Node, storage: "template-" + t.Node}
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

// user is the Proxmox user (or API token) the provider's tasks run as.
func (p *Provider) user() string {
	if p.cfg.TokenID != "" {
		return p.cfg.TokenID
	}
	return p.cfg.Username
}
