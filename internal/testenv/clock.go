package testenv

import (
	"sync/atomic"
	"testing"
	"time"
)

// SteppedClock is real time plus what the tests stepped it by: a deadline
// (a claim's timeout, a finalization deadline, a token's expiry) passes when
// a test says so instead of being waited out. It is a clock.PassiveClock.
type SteppedClock struct{ offset atomic.Int64 }

func (c *SteppedClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *SteppedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Step moves the clock d ahead until t ends, so no later test finds its
// deadlines already past.
func (c *SteppedClock) Step(t *testing.T, d time.Duration) {
	c.offset.Add(int64(d))
	t.Cleanup(func() { c.offset.Add(-int64(d)) })
}
