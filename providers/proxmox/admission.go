package proxmox

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
)

// admission caps concurrent clones per node and per storage, so a burst of
// claims queues in the operator instead of piling onto Proxmox's storage lock
// (whose timeouts fail clones outright). Slots are held from the clone call
// until its task is seen finished. Clones this provider did not start (an
// earlier process, before a restart, a failover or a rebuild of the
// provider) are counted from Proxmox's running tasks (syncAdmission), by
// UPID, until the node's task listing shows them ended.
//
// A request that finds no free slot waits in a queue ordered by when its
// owner asked (MachineSpec.Requested, which the API server keeps), so the
// order survives a restart. A slot that comes free is reserved at once for
// the longest-waiting request that can use it, and its owner woken: it is
// neither lost to the next poll nor taken by a newer request.
type admission struct {
	perNode, perStorage int
	// wake is called, outside the lock, with the owner a slot was reserved for.
	wake func(providers.Owner)
	// reservationTTL bounds how long a reserved slot waits for its owner
	// (deleted, or moved to another cluster, it never comes).
	reservationTTL time.Duration

	mu       sync.Mutex
	byVMID   map[int]slot
	restored map[string]slot // by UPID: running clones of an earlier process
	reserved map[int]reservation
	queue    []waiter // longest-waiting first
	gen      uint64
	node     map[string]int
	storage  map[string]int
}

type slot struct{ node, storage string }

type reservation struct {
	slot
	gen uint64
}

// waiter is a clone request that found no free slot.
type waiter struct {
	vmid  int
	owner providers.Owner
	since time.Time
	// nodes it may be placed on, best first, and the storage it counts against.
	nodes   []string
	storage string
}

func (w waiter) before(o waiter) int {
	return cmp.Or(w.since.Compare(o.since), cmp.Compare(w.owner.Namespace, o.owner.Namespace),
		cmp.Compare(w.owner.Name, o.owner.Name), cmp.Compare(w.vmid, o.vmid))
}

func newAdmission(perNode, perStorage int) *admission {
	return &admission{perNode: perNode, perStorage: perStorage, reservationTTL: time.Minute,
		byVMID: map[int]slot{}, restored: map[string]slot{}, reserved: map[int]reservation{},
		node: map[string]int{}, storage: map[string]int{}}
}

// tryAcquire takes a slot for vmid on node and storage, or reports false.
// Taking a slot vmid already holds succeeds.
func (a *admission) tryAcquire(vmid int, node, storage string) bool {
	_, ok := a.admit(waiter{vmid: vmid, nodes: []string{node}, storage: storage}, false)
	return ok
}

// admit gives w a slot on the first of its nodes that has one free — the
// one reserved for it, if any — and returns that node; else, when queue is
// set, it queues w and reports false.
func (a *admission) admit(w waiter, queue bool) (string, bool) {
	a.mu.Lock()
	var woken []providers.Owner
	defer func() { a.mu.Unlock(); a.notify(woken) }()
	if s, ok := a.byVMID[w.vmid]; ok {
		return s.node, true
	}
	if r, ok := a.reserved[w.vmid]; ok {
		delete(a.reserved, w.vmid)
		if r.storage == w.storage && slices.Contains(w.nodes, r.node) {
			a.byVMID[w.vmid] = r.slot
			a.dequeue(w.vmid)
			return r.node, true
		}
		// It cannot use the slot kept for it: the next in line may.
		a.give(r.slot)
		defer func() { woken = a.handOut() }()
	}
	for _, n := range w.nodes {
		if a.fits(n, w.storage) {
			a.take(n, w.storage)
			a.byVMID[w.vmid] = slot{n, w.storage}
			a.dequeue(w.vmid)
			return n, true
		}
	}
	if queue {
		a.enqueue(w)
	}
	return "", false
}

// offer reports whether w can take a slot now: it holds one, one is
// reserved for it, or one of its nodes has one free, which is then
// reserved for it (so that of a burst of offers only as many pass as there
// are slots, and the rest queue at once). If not, it queues w, as admit
// would.
func (a *admission) offer(w waiter) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.byVMID[w.vmid]; ok {
		return true
	}
	if _, ok := a.reserved[w.vmid]; ok {
		return true
	}
	for _, n := range w.nodes {
		if a.fits(n, w.storage) {
			a.reserve(w.vmid, slot{n, w.storage})
			return true
		}
	}
	a.enqueue(w)
	return false
}

// free reports whether a clone could start on node and storage now.
func (a *admission) free(node, storage string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fits(node, storage)
}

// release gives back vmid's slot, if it holds one, to the longest-waiting
// request that can use it.
func (a *admission) release(vmid int) {
	a.mu.Lock()
	var woken []providers.Owner
	defer func() { a.mu.Unlock(); a.notify(woken) }()
	s, ok := a.byVMID[vmid]
	if !ok {
		return
	}
	delete(a.byVMID, vmid)
	a.give(s)
	woken = a.handOut()
}

// withdraw takes vmid out of the queue and gives back a slot reserved for
// it: its machine is being deleted.
func (a *admission) withdraw(vmid int) {
	a.mu.Lock()
	var woken []providers.Owner
	defer func() { a.mu.Unlock(); a.notify(woken) }()
	a.dequeue(vmid)
	if r, ok := a.reserved[vmid]; ok {
		delete(a.reserved, vmid)
		a.give(r.slot)
		woken = a.handOut()
	}
}

// inFlight is how many clones hold slots, ours and restored ones.
func (a *admission) inFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byVMID) + len(a.restored)
}

// queued is how many requests wait for a slot.
func (a *admission) queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue)
}

// restore makes the restored slots exactly running (by UPID): slots of
// clones no longer running are given back, newly seen ones taken. Restored
// slots may exceed the limits; they only keep new clones out.
func (a *admission) restore(running map[string]slot) {
	a.mu.Lock()
	var woken []providers.Owner
	defer func() { a.mu.Unlock(); a.notify(woken) }()
	for upid, s := range a.restored {
		if _, ok := running[upid]; !ok {
			delete(a.restored, upid)
			a.give(s)
		}
	}
	for upid, s := range running {
		if _, ok := a.restored[upid]; ok {
			continue
		}
		a.restored[upid] = s
		a.take(s.node, s.storage)
	}
	woken = a.handOut()
}

// endRestored gives back the restored slot of upid, whose task ended.
func (a *admission) endRestored(upid string) {
	a.mu.Lock()
	var woken []providers.Owner
	defer func() { a.mu.Unlock(); a.notify(woken) }()
	s, ok := a.restored[upid]
	if !ok {
		return
	}
	delete(a.restored, upid)
	a.give(s)
	woken = a.handOut()
}

// restoredOn lists the UPIDs of the restored clones on node.
func (a *admission) restoredOn(node string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for upid, s := range a.restored {
		if s.node == node {
			out = append(out, upid)
		}
	}
	return out
}

// handOut reserves each free slot for the longest-waiting request that can
// use it, and returns their owners to wake. A request that fits nowhere
// free keeps its place; one behind it may still take a slot it cannot use.
// The caller holds a.mu.
func (a *admission) handOut() []providers.Owner {
	var woken []providers.Owner
	for _, w := range a.queue {
		if _, ok := a.reserved[w.vmid]; ok {
			continue
		}
		for _, n := range w.nodes {
			if !a.fits(n, w.storage) {
				continue
			}
			a.reserve(w.vmid, slot{n, w.storage})
			woken = append(woken, w.owner)
			break
		}
	}
	return woken
}

// reserve takes s and keeps it for vmid until its owner comes for it, at
// most reservationTTL. The caller holds a.mu.
func (a *admission) reserve(vmid int, s slot) {
	a.take(s.node, s.storage)
	a.gen++
	a.reserved[vmid] = reservation{s, a.gen}
	gen := a.gen
	time.AfterFunc(a.reservationTTL, func() { a.expire(vmid, gen) })
}

// expire gives a reservation its owner never came for to the next in line;
// the owner, if it comes after all, queues again in its place.
func (a *admission) expire(vmid int, gen uint64) {
	a.mu.Lock()
	var woken []providers.Owner
	defer func() { a.mu.Unlock(); a.notify(woken) }()
	r, ok := a.reserved[vmid]
	if !ok || r.gen != gen {
		return
	}
	delete(a.reserved, vmid)
	a.dequeue(vmid)
	a.give(r.slot)
	woken = a.handOut()
}

func (a *admission) notify(owners []providers.Owner) {
	if a.wake == nil {
		return
	}
	for _, o := range owners {
		a.wake(o)
	}
}

// The helpers below expect a.mu held.

func (a *admission) fits(node, storage string) bool {
	return a.node[node] < a.perNode && a.storage[storage] < a.perStorage
}

func (a *admission) take(node, storage string) {
	a.node[node]++
	a.storage[storage]++
}

func (a *admission) give(s slot) {
	a.node[s.node]--
	a.storage[s.storage]--
}

// enqueue puts w in its place in the queue, or refreshes its candidates.
func (a *admission) enqueue(w waiter) {
	a.dequeue(w.vmid)
	i, _ := slices.BinarySearchFunc(a.queue, w, waiter.before)
	a.queue = slices.Insert(a.queue, i, w)
}

func (a *admission) dequeue(vmid int) {
	a.queue = slices.DeleteFunc(a.queue, func(w waiter) bool { return w.vmid == vmid })
}
