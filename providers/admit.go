package providers

import "context"

// Admitter is implemented by a provider that makes machines wait their turn
// (Proxmox's clone slots). Its caller asks Admit before it records a new
// machine's reference, so that a machine that must wait costs one status
// write (the reference and the wait together) instead of two (the
// reference, then the wait found by Create).
//
// Admit makes nothing on the hypervisor. It returns an error matching
// ErrQueued when the machine must wait: it is then queued exactly as Create
// would queue it, and woken (Waker) when its turn comes. nil means it could
// start now; the caller records the reference and calls Create, which may
// still queue it if another took the turn in between. Any other error is
// one Create would return for the same spec.
type Admitter interface {
	Admit(ctx context.Context, spec MachineSpec) error
}
