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
	p.tasks[vmid] = &watchedTask{kind: kind, task: task, started: time.Now()}
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
		return classify(fmt.Sprintf("reading the %s task of VM %d", t.kind, vmid), err)
	}
	if t.task.IsRunning {
		if time.Since(t.started) > p.cfg.TaskTimeout {
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
