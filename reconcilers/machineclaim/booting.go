package machineclaim

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
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
// startTime by as much. It is the driver's memory (Kind.Memory), so a
// claim deleted while booting is forgotten there.
type booting struct {
	skeleton.Memory[boot]
}

type boot struct {
	since time.Time
	// node is where the machine was seen: the next look goes straight
	// there rather than asking the hypervisor to find the machine (on
	// Proxmox a VMID check and a listing of every VM, each poll).
	node string
}

// seen returns when the claim's machine was first seen running, taking
// now for a first look, and notes the node it was seen on. Read and write
// need no lock between them: a claim's reconciles never run at once.
func (b *booting) seen(c client.Object, now time.Time, node string) time.Time {
	t, ok := b.Load(c)
	if !ok {
		t.since = now
	}
	if node != "" {
		t.node = node
	}
	b.Store(c, t)
	return t.since
}

// node is where the claim's booting machine was last seen, "" if unknown.
func (b *booting) node(c client.Object) string {
	t, _ := b.Load(c)
	return t.node
}

// known says whether the claim's machine was seen running.
func (b *booting) known(c client.Object) bool {
	_, ok := b.Load(c)
	return ok
}

// forget drops the claim's boot: its start is in status, or it ended.
func (b *booting) forget(c client.Object) {
	b.Forget(client.ObjectKeyFromObject(c))
}

// started says whether the claim's machine runs: recorded in status, or
// seen running and not yet written. The steps before a machine runs
// (address, attestation, create) are then done.
func (r *Reconciler) started(c *hypervisorv1alpha1.MachineClaim) bool {
	return c.Status.StartTime != nil || r.booting.known(c)
}
