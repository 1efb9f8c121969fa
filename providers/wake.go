package providers

// Waker is implemented by a provider that notices for itself when a
// machine can move on — a task it started ended, or a clone slot it queued
// the machine for was given to it — so its caller waits to be told instead
// of polling. The provider calls the function set by OnWake with the
// machine's owner; the caller then calls Create or Observe again.
//
// A wake is a hint, never the only way on: callers still look again after
// a long interval, so a wake lost to a restart costs time, not the machine.
type Waker interface {
	// OnWake sets the function called with the owner of each machine that
	// can move on. It is called from the provider's own goroutines and
	// must not block.
	OnWake(wake func(Owner))
}
