package proxmox

import "sync"

// admission caps concurrent clones per node and per storage, so a burst of
// claims queues in the operator instead of piling onto Proxmox's storage lock
// (whose timeouts fail clones outright). Slots are held from the clone call
// until its task is seen finished. Clones this provider did not start (an
// earlier process, before a restart, a failover or a rebuild of the
// provider) are counted from Proxmox's running tasks (syncAdmission), by
// UPID, until a later listing shows them ended.
type admission struct {
	perNode, perStorage int

	mu       sync.Mutex
	byVMID   map[int]slot
	restored map[string]slot // by UPID: running clones of an earlier process
	node     map[string]int
	storage  map[string]int
}

type slot struct{ node, storage string }

func newAdmission(perNode, perStorage int) *admission {
	return &admission{perNode: perNode, perStorage: perStorage,
		byVMID: map[int]slot{}, restored: map[string]slot{}, node: map[string]int{}, storage: map[string]int{}}
}

// tryAcquire takes a slot for vmid on node and storage, or reports false.
// Taking a slot vmid already holds succeeds.
func (a *admission) tryAcquire(vmid int, node, storage string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.byVMID[vmid]; ok {
		return true
	}
	if a.node[node] >= a.perNode || a.storage[storage] >= a.perStorage {
		return false
	}
	a.byVMID[vmid] = slot{node, storage}
	a.node[node]++
	a.storage[storage]++
	return true
}

// free reports whether a clone could start on node and storage now.
func (a *admission) free(node, storage string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node[node] < a.perNode && a.storage[storage] < a.perStorage
}

// release gives back vmid's slot, if it holds one.
func (a *admission) release(vmid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.byVMID[vmid]
	if !ok {
		return
	}
	delete(a.byVMID, vmid)
	a.node[s.node]--
	a.storage[s.storage]--
}

// inFlight is how many clones hold slots, ours and restored ones.
func (a *admission) inFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byVMID) + len(a.restored)
}

// restore makes the restored slots exactly running (by UPID): slots of
// clones no longer running are given back, newly seen ones taken. Restored
// slots may exceed the limits; they only keep new clones out.
func (a *admission) restore(running map[string]slot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for upid, s := range a.restored {
		if _, ok := running[upid]; !ok {
			delete(a.restored, upid)
			a.node[s.node]--
			a.storage[s.storage]--
		}
	}
	for upid, s := range running {
		if _, ok := a.restored[upid]; ok {
			continue
		}
		a.restored[upid] = s
		a.node[s.node]++
		a.storage[s.storage]++
	}
}

// restoredCount is how many restored slots are held.
func (a *admission) restoredCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.restored)
}
