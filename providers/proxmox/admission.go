package proxmox

import "sync"

// admission caps concurrent clones per node and per storage, so a burst of
// claims queues in the operator instead of piling onto Proxmox's storage lock
// (whose timeouts fail clones outright). Slots are held from the clone call
// until its task is seen finished. The count is in memory: after a restart,
// clones already running are not counted until they finish.
type admission struct {
	perNode, perStorage int

	mu      sync.Mutex
	byVMID  map[int]slot
	node    map[string]int
	storage map[string]int
}

type slot struct{ node, storage string }

func newAdmission(perNode, perStorage int) *admission {
	return &admission{perNode: perNode, perStorage: perStorage,
		byVMID: map[int]slot{}, node: map[string]int{}, storage: map[string]int{}}
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

// inFlight is how many clones hold slots.
func (a *admission) inFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byVMID)
}
