package machineclaim

import (
	"math/rand/v2"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// backoff tracks consecutive failures per claim for exponential retry delays
// with jitter, so a failing hypervisor is not hammered in lockstep. It is the
// driver's memory (Kind.Memory): a claim gone or released is forgotten there,
// so only a success needs reset.
type backoff struct {
	skeleton.Memory[int]
}

const (
	backoffBase = 2 * time.Second
	backoffMax  = 5 * time.Minute
)

// next records a failure and returns the delay before the next attempt,
// never less than floor (a provider's Retry-After hint). The count is read
// and written apart: a claim's reconciles never run at once (the workqueue
// holds its key while one runs), so no other failure of it comes between.
func (b *backoff) next(c client.Object, floor time.Duration) time.Duration {
	n, _ := b.Load(c)
	b.Store(c, n+1)
	d := backoffBase << min(n, 10)
	d = min(d, backoffMax)
	d = max(d, floor)
	// ±20% jitter.
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64())) //nolint:gosec // jitter needs no crypto
}

// reset forgets the claim's failures: its last step succeeded.
func (b *backoff) reset(c client.Object) {
	b.Forget(client.ObjectKeyFromObject(c))
}

// jitter spreads a poll by ±10% (pollWhileBusy when d is not positive), so
// claims made together do not poll together.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		d = pollWhileBusy
	}
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64())) //nolint:gosec // jitter needs no crypto
}
