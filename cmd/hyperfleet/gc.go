package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the operator's GOGC. Its heap is mostly the
// informers' cache, which lives as long as the objects it mirrors; Go's
// default of 100 lets garbage grow to the cache's own size before each
// collection, so the resident set is about twice the cache. At 50 it is
// about one and a half times, for more frequent, short collections of a
// process that is idle most of the time (make bench-memory prints both
// the resident set and the CPU the operator used).
const defaultGCPercent = 50

// setGCPercent applies percent unless the GOGC variable is set, which
// always wins, and returns the value in effect (-1: collection off).
func setGCPercent(percent int) int {
	if _, set := os.LookupEnv("GOGC"); set {
		v := debug.SetGCPercent(100)
		debug.SetGCPercent(v)
		return v
	}
	debug.SetGCPercent(percent)
	return percent
}
