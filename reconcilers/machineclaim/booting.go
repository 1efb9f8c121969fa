package machineclaim

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// addressGrace is how long a machine may run before its guest reports an
// address and still be shown as being made. A normal boot reports within
// it (a cloud image with the QEMU guest agent, a KubeVirt VMI), so the
// claim goes from Provisioning straight to Ready: Running would be a
// status write per claim for a state that lasts seconds and that nobody
// acts on. A guest still silent after it is worth saying: the claim turns
// Running (WaitingForAddress), with an event, naming what to check.
const addressGrace = 30 * time.Second

// booting remembers, per claim, when its machine was first seen running
// without an address, and on which node, until that is written to status
// (startTime, node) or the claim ends. It only saves writes: a restart or
// a change of leader forgets it, and the machine is then seen running
// anew, which delays the Running phase by at most one grace and moves
// startTime by as much.
type booting struct {
	mu    sync.Mutex
	boots map[types.UID]boot
}

type boot struct {
	since time.Time
	// node is where the machine was seen: the next look goes straight
	// there rather than asking the hypervisor to find the machine (on
	// Proxmox a VMID check and a listing of every VM, each poll).
	node string
}

// seen returns when the claim's machine was first seen running, taking
// now for a first look, and notes the node it was seen on.
func (b *booting) seen(uid types.UID, now time.Time, node string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.boots == nil {
		b.boots = map[types.UID]boot{}
	}
	t, ok := b.boots[uid]
	if !ok {
		t.since = now
	}
	if node != "" {
		t.node = node
	}
	b.boots[uid] = t
	return t.since
}

// node is where the claim's booting machine was last seen, "" if unknown.
func (b *booting) node(uid types.UID) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boots[uid].node
}

// known says whether the claim's machine was seen running.
func (b *booting) known(uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.boots[uid]
	return ok
}

func (b *booting) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.boots, uid)
}

// started says whether the claim's machine runs: recorded in status, or
// seen running and not yet written. The steps before a machine runs
// (address, attestation, create) are then done.
func (r *Reconciler) started(c *hypervisorv1alpha1.MachineClaim) bool {
	return c.Status.StartTime != nil || r.booting.known(c.UID)
}
