package proxmox

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Task completion is observed per node, not per machine: while this
// provider has tasks running on a node, one goroutine lists that node's
// tasks (GET /nodes/{node}/tasks) every TaskPollInterval (half of it while
// clones queue for a slot) and, for each task
// the listing shows ended, records how it ended, gives back its clone slot
// at once (to the longest-waiting queued clone, admission.go) and wakes
// exactly its owner. However many machines are being made, a node costs
// one request per interval, and a machine waits for its task no longer
// than that interval. The goroutine ends when the node has nothing left to
// watch, so an idle or replaced provider keeps none running.

// OnWake sets the function called with the owner of a machine that can
// move on: its task ended, or a clone slot was reserved for it.
func (p *Provider) OnWake(wake func(providers.Owner)) {
	p.wake.Store(&wake)
}

func (p *Provider) notify(o providers.Owner) {
	if f := p.wake.Load(); f != nil && o.UID != "" {
		(*f)(o)
	}
}

// ensureWatcher starts node's watcher unless it runs. The caller holds p.mu.
func (p *Provider) ensureWatcher(node string) {
	if node == "" || p.watchers[node] {
		return
	}
	p.watchers[node] = true
	go p.watchNode(node)
}

func (p *Provider) watchNode(node string) {
	t := time.NewTimer(p.pollDelay())
	defer t.Stop()
	for range t.C {
		if !p.pollNode(node) {
			return
		}
		t.Reset(p.pollDelay())
	}
}

// pollDelay is how long until a node's next task listing: TaskPollInterval,
// or half of it while clones wait for a slot. Then a clone's end is what
// the next machine waits for, and seeing it half an interval sooner on
// average is the one part of a slot's hand-over the provider controls
// (at 1,000 claims on 8 slots, about 100 of the 240 ms a freed slot
// stood idle; make bench-claims). The extra listings are spent only
// while there is a queue.
func (p *Provider) pollDelay() time.Duration {
	if p.admission.queued() > 0 {
		return p.cfg.TaskPollInterval / 2
	}
	return p.cfg.TaskPollInterval
}

// pollNode lists node's tasks once and settles those that ended; false
// when the node has nothing left to watch (the watcher then ends).
func (p *Provider) pollNode(node string) bool {
	restored := p.admission.restoredOn(node)
	p.mu.Lock()
	var since time.Time
	watched := 0
	for _, t := range p.tasks {
		if t.node == node && !t.ended {
			watched++
			since = earliest(since, upidStart(t.upid))
		}
	}
	for _, upid := range restored {
		since = earliest(since, upidStart(upid))
	}
	if watched == 0 && len(restored) == 0 {
		delete(p.watchers, node)
		p.mu.Unlock()
		return false
	}
	p.mu.Unlock()

	ended, _ := p.endedTasks(node, since)
	now := p.now()
	var woken []providers.Owner
	var release []int
	p.mu.Lock()
	for vmid, t := range p.tasks {
		if t.node != node || t.ended {
			continue
		}
		exit, ok := ended[t.upid]
		switch {
		case ok:
			t.ended, t.exit = true, exit
			p.noteWarnings(vmid, t)
		case now.Sub(t.started) > p.cfg.TaskTimeout:
			// The timeout holds whether or not the listing answers (its
			// node may be offline), so no task holds a clone slot for ever.
			t.ended, t.timedOut = true, true
		default:
			continue
		}
		if t.kind == "Clone" {
			release = append(release, vmid)
		}
		woken = append(woken, t.owner)
	}
	p.mu.Unlock()
	for _, upid := range restored {
		_, ok := ended[upid]
		if start := upidStart(upid); ok || (!start.IsZero() && now.Sub(start) > p.cfg.TaskTimeout) {
			p.admission.endRestored(upid)
		}
	}
	for _, vmid := range release {
		p.admission.release(vmid)
	}
	for _, o := range woken {
		p.notify(o)
	}
	return true
}

// endedTasks lists node's tasks of this provider's user started since
// since, and returns the exit status of those that ended, by UPID. A
// listing that fails returns none: the tasks are looked for again at the
// next interval, and the task timeout still applies.
func (p *Provider) endedTasks(node string, since time.Time) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	defer cancel()
	user, _ := p.splitUser()
	q := url.Values{
		// all: running and finished, whichever file Proxmox keeps a
		// just-ended task in.
		"source": {"all"},
		// Proxmox matches userfilter, case-insensitively and as a
		// substring, against the user of each row, and an archived task of
		// an API token lists only the token's user there (the token name
		// goes to tokenid): filtering on the whole token id would hide every
		// ended task of the token. So the filter names the user, and mine
		// picks the rows of our exact user and token.
		"userfilter": {user},
		// Proxmox lists 50 by default; a burst may end more in one interval.
		"limit": {"100000"},
	}
	if !since.IsZero() {
		// A second early: the UPID's start is the node's clock, whole seconds.
		q.Set("since", strconv.FormatInt(since.Unix()-1, 10))
	}
	var rows []*taskRow
	if err := p.client.Get(ctx, "/nodes/"+url.PathEscape(node)+"/tasks?"+q.Encode(), &rows); err != nil {
		return nil, classify("listing the tasks of node "+node, err)
	}
	ended := map[string]string{}
	for _, r := range rows {
		if r == nil || r.running() || !p.mine(r) {
			continue
		}
		exit := r.Status
		if exit == "" {
			// Ended with no status written (a crashed worker): not a success.
			exit = "unexpected status"
		}
		ended[r.UPID] = exit
	}
	return ended, nil
}

// upidStart reads a task's start from its UPID
// (UPID:node:pid:pstart:starttime:type:id:user:, hex fields); zero if the
// UPID cannot be read.
func upidStart(upid string) time.Time {
	parts := strings.Split(upid, ":")
	if len(parts) < 5 {
		return time.Time{}
	}
	sec, err := strconv.ParseInt(parts[4], 16, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(sec, 0)
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
