package machineclaim

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// backoff tracks consecutive failures per claim for exponential retry delays
// with jitter, so a failing hypervisor is not hammered in lockstep.
type backoff struct {
	mu       sync.Mutex
	failures map[types.UID]int
}

const (
	backoffBase = 2 * time.Second
	backoffMax  = 5 * time.Minute
)

// next records a failure and returns the delay before the next attempt,
// never less than floor (a provider's Retry-After hint).
func (b *backoff) next(uid types.UID, floor time.Duration) time.Duration {
	b.mu.Lock()
	if b.failures == nil {
		b.failures = map[types.UID]int{}
	}
	n := b.failures[uid]
	b.failures[uid] = n + 1
	b.mu.Unlock()
	d := backoffBase << min(n, 10)
	d = min(d, backoffMax)
	d = max(d, floor)
	// ±20% jitter.
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64())) //nolint:gosec // jitter needs no crypto
}

func (b *backoff) reset(uid types.UID) {
	b.mu.Lock()
	delete(b.failures, uid)
	b.mu.Unlock()
}

// jitter spreads a poll by ±10% (pollWhileBusy when d is not positive), so
// claims made together do not poll together.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		d = pollWhileBusy
	}
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64())) //nolint:gosec // jitter needs no crypto
}
