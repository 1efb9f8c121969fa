package machineclaim

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// reservationTTL is how long a standby claim this process bound (or tried
// to) is passed over by its other binds: longer than the cache takes to
// show a binding, shorter than standby.RecordWithin.
const reservationTTL = 15 * time.Second

// reservations are the standby claims this process is binding or bound a
// moment ago. Claims reconciled side by side read the same free list from
// the cache, which shows a binding only after its watch event: each trying
// the oldest machine first, all but one lose that patch to a conflict,
// then race for the next, and a burst of n claims costs the API server
// about n²/2 refused patches (measured: 2,080 conflicts for 100 claims, a
// fifth of the burst's requests). A worker passes over what another has
// reserved instead. Exactly-once rests on the patch's resourceVersion
// precondition, not on this: another replica, or this one after a restart,
// knows none of it, and only loses a patch.
type reservations struct {
	mu sync.Mutex
	m  map[types.UID]time.Time
}

// reserve reserves uid at now; false if it is reserved already.
func (r *reservations) reserve(uid types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.UID]time.Time{}
	}
	for u, at := range r.m {
		if now.Sub(at) >= reservationTTL {
			delete(r.m, u)
		}
	}
	if _, held := r.m[uid]; held {
		return false
	}
	r.m[uid] = now
	return true
}

// release gives uid back at once: its bind failed without an answer.
func (r *reservations) release(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, uid)
}
