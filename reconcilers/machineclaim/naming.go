package machineclaim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// VMIDs are drawn from a range humans rarely use, by a hash of the claim's
// UID: deterministic (a retry after a crash picks the same one) and spread
// (concurrent claims rarely collide). A collision with a VM we do not own
// moves to the next candidate, recorded in status before the next create.
const (
	vmidMin  = 100000
	vmidSpan = 900000
)

func vmidCandidate(uid types.UID, previous int32) int32 {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d", uid, previous)
	return int32(vmidMin + h.Sum64()%vmidSpan)
}

// machineName is the VM's name: "hf-<namespace>-<name>", a DNS label of at
// most 63 characters (a hash suffix keeps long names unique).
func machineName(namespace, name string) string {
	n := strings.ToLower("hf-" + namespace + "-" + name)
	n = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			return r
		}
		return '-'
	}, n)
	if len(n) <= 63 {
		return strings.TrimRight(n, "-")
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace + "/" + name))
	return fmt.Sprintf("%s-%08x", strings.TrimRight(n[:54], "-"), h.Sum32())
}

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
