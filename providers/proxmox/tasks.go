package proxmox

import (
	"context"
	"fmt"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// watch remembers a task this provider started for vmid.
func (p *Provider) watch(vmid int, kind string, task *proxmox.Task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tasks[vmid] = &watchedTask{kind: kind, task: task, started: p.now()}
}

// pending reports whether vmid has a task of this provider still running.
func (p *Provider) pending(vmid int) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tasks[vmid]
	if !ok {
		return "", false
	}
	return t.kind, true
}

// taskError polls vmid's watched task once. A finished task is forgotten (and
// a clone's admission slot released); a failed one becomes an error carrying
// Proxmox's exit status; one running past TaskTimeout is reported, not
// waited on forever.
func (p *Provider) taskError(ctx context.Context, vmid int) error {
	p.mu.Lock()
	t, ok := p.tasks[vmid]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	if err := t.task.Ping(ctx); err != nil {
		// A task whose status cannot be read (its node is offline, or
		// Proxmox lost it) must not hold its clone slot for ever: the
		// timeout holds whether or not the status answers.
		if p.now().Sub(t.started) > p.cfg.TaskTimeout {
			p.forget(vmid)
			return providers.Transient("TaskTimedOut", 30*time.Second,
				fmt.Errorf("the %s task of VM %d could not be read for %s (task %s): %w", t.kind, vmid, p.cfg.TaskTimeout, t.task.UPID,
					classify("reading its status", err)))
		}
		return classify(fmt.Sprintf("reading the %s task of VM %d", t.kind, vmid), err)
	}
	if t.task.IsRunning {
		if p.now().Sub(t.started) > p.cfg.TaskTimeout {
			p.forget(vmid)
			return providers.Transient("TaskTimedOut", 30*time.Second,
				fmt.Errorf("the %s task of VM %d ran longer than %s (task %s)", t.kind, vmid, p.cfg.TaskTimeout, t.task.UPID))
		}
		return nil
	}
	p.forget(vmid)
	if t.task.IsFailed {
		return providers.Transient(t.kind+"Failed", 10*time.Second,
			fmt.Errorf("the %s task of VM %d failed: %s", t.kind, vmid, t.task.ExitStatus))
	}
	return nil
}

func (p *Provider) forget(vmid int) {
	p.mu.Lock()
	delete(p.tasks, vmid)
	p.mu.Unlock()
	p.admission.release(vmid)
}

// syncAdmission counts, in admission, the clones running on Proxmox under
// this provider's user that it did not start itself: those of an earlier
// process (before a restart or a failover) or of the provider this one
// replaced (a HypervisorCluster's spec or Secret changed). It lists
// /cluster/tasks, which holds every node's running tasks (a running one has
// no end time and no exit status), before the first clone and, while such
// clones are counted, again at most every admissionSyncTTL, so their slots
// are given back once they end. A clone running longer than TaskTimeout no
// longer counts, as for the clones this provider watches. Until the listing
// succeeds no clone starts: starting one blind could break the limits.
func (p *Provider) syncAdmission(ctx context.Context) error {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	if !p.syncedAt.IsZero() && (p.admission.restoredCount() == 0 || p.now().Sub(p.syncedAt) < admissionSyncTTL) {
		return nil
	}
	var tasks []*proxmox.Task
	if err := p.client.Get(ctx, "/cluster/tasks", &tasks); err != nil {
		return classify("listing Proxmox's running tasks to count clones in progress", err)
	}
	ours := map[string]bool{}
	p.mu.Lock()
	for _, t := range p.tasks {
		ours[string(t.task.UPID)] = true
	}
	p.mu.Unlock()
	user := p.cfg.TokenID
	if user == "" {
		user = p.cfg.Username
	}
	running := map[string]slot{}
	for _, t := range tasks {
		if t == nil || t.Type != "qmclone" || t.User != user || ours[string(t.UPID)] ||
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
	p.syncedAt = p.now()
	return nil
}

// admissionSyncTTL bounds how often syncAdmission lists tasks again while
// clones of an earlier process are counted.
const admissionSyncTTL = 2 * time.Second
