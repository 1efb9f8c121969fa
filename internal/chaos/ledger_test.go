package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// sighting is one machine seen on a hypervisor, with the claim UID it
// carries (Proxmox: the owner tag or description line; KubeVirt: the
// owner-uid label).
type sighting struct {
	owner   string
	machine string // "pve/<VMID>" or "kv/<namespace>/<name>"
}

// ledger remembers, for every claim UID, every machine ever seen carrying
// it. A claim with two machines, at the same time or one after the other,
// is a twin: the reference is recorded before the create call precisely so
// that a retry, a restart or a failover finds the same machine.
type ledger struct {
	mu sync.Mutex
	// machines: owner UID → machine → first seen.
	machines map[string]map[string]time.Time
	// together: owners seen with two machines in one snapshot.
	together map[string]bool
	polls    int
}

func newLedger() *ledger {
	return &ledger{machines: map[string]map[string]time.Time{}, together: map[string]bool{}}
}

// observe records one snapshot of every hypervisor.
func (l *ledger) observe(at time.Time, seen []sighting) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.polls++
	now := map[string]map[string]bool{}
	for _, s := range seen {
		if s.owner == "" {
			continue // a clone still running shows no owner yet
		}
		if now[s.owner] == nil {
			now[s.owner] = map[string]bool{}
		}
		now[s.owner][s.machine] = true
		if l.machines[s.owner] == nil {
			l.machines[s.owner] = map[string]time.Time{}
		}
		if _, ok := l.machines[s.owner][s.machine]; !ok {
			l.machines[s.owner][s.machine] = at
		}
	}
	for owner, ms := range now {
		if len(ms) > 1 {
			l.together[owner] = true
		}
	}
}

// twin is a claim UID that had more than one machine.
type twin struct {
	owner    string
	machines []string
	together bool
}

func (t twin) String() string {
	when := "one after the other"
	if t.together {
		when = "at the same time"
	}
	return fmt.Sprintf("claim UID %s: %s (%s)", t.owner, strings.Join(t.machines, ", "), when)
}

// twins lists the claim UIDs with more than one machine, sorted.
func (l *ledger) twins() []twin {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []twin
	for owner, ms := range l.machines {
		if len(ms) > 1 {
			out = append(out, twin{owner: owner, machines: slices.Sorted(maps.Keys(ms)), together: l.together[owner]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].owner < out[j].owner })
	return out
}

// owners is how many claim UIDs had a machine; polls how many snapshots
// were taken.
func (l *ledger) counts() (owners, polls int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.machines), l.polls
}
