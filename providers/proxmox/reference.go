package proxmox

import (
	"fmt"
	"hash/fnv"

	"github.com/hyperfleet/hyperfleet/providers"
)

// VMIDs are drawn from a range humans rarely use, by a hash of the owner's
// UID: deterministic (a retry after a crash picks the same one) and spread
// (concurrent claims rarely collide). A collision with a VM we do not own
// moves to the next candidate, which the caller records before the next
// create.
const (
	vmidMin  = 100000
	vmidSpan = 900000
)

func vmidCandidate(uid string, previous int) int {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d", uid, previous)
	return int(vmidMin + h.Sum64()%vmidSpan)
}

// Reference is the owner's machine name and a VMID from the owner's hash.
func (p *Provider) Reference(owner providers.Owner) providers.MachineRef {
	return providers.MachineRef{Name: providers.MachineName(owner), Namespace: owner.Namespace, VMID: vmidCandidate(owner.UID, 0)}
}

// NextReference keeps the name and moves to the next VMID of the owner's
// sequence: a VMID, unlike a name, may be held by anyone's VM.
func (p *Provider) NextReference(owner providers.Owner, taken providers.MachineRef) (providers.MachineRef, bool) {
	next := taken
	next.VMID = vmidCandidate(owner.UID, taken.VMID)
	return next, true
}
