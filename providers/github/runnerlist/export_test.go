package runnerlist

import "github.com/hyperfleet/hyperfleet/providers/github"

// Waiters is how many callers joined the listing of fingerprint and scope
// in flight (0 when none is).
func Waiters(c *Cache, fingerprint string, scope github.Scope) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[keyOf(fingerprint, scope)]
	if e == nil || e.call == nil {
		return 0
	}
	return e.call.waiters
}
