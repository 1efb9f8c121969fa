// Package eventually is the one polling helper of the tests: wait, with a
// bound, for a state, instead of sleeping for a guessed time.
package eventually

import (
	"testing"
	"time"
)

// The first polls come quickly, for in-process state that changes in
// microseconds; later ones settle at MaxInterval, so a long wait on the
// API server does not hammer it.
const (
	firstInterval = 5 * time.Millisecond
	// MaxInterval is the longest pause between two polls.
	MaxInterval = 100 * time.Millisecond
)

// That polls cond, every MaxInterval at most, until it returns true or timeout passes,
// then fails the test with cond's last description of what it saw.
func That(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	if ok, last := Within(timeout, cond); !ok {
		t.Fatalf("not within %s: %s", timeout, last)
	}
}

// Within polls cond as That does and reports whether it returned true
// before timeout passed, with its last description, for a caller that
// must not fail the test itself (a property's command, whose failure is
// the property's to report).
func Within(timeout time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	pause := firstInterval
	for {
		ok, last := cond()
		if ok || time.Now().After(deadline) {
			return ok, last
		}
		time.Sleep(pause)
		pause = min(2*pause, MaxInterval)
	}
}

// True polls cond until it returns true or timeout passes, then fails the
// test saying what was awaited.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	That(t, timeout, func() (bool, string) { return cond(), what })
}

// Holds is Within for a condition without a description: whether cond
// held before timeout passed, failing nothing (a property's command).
func Holds(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	pause := firstInterval
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, MaxInterval)
	}
}
