// Package runnerstate is what the RunnerPool reconciler (which scales) and
// the runner reconciler (which looks after each runner) both read of a
// runner: the labels and annotations on its MachineClaim, its lifetimes,
// and the verdict on one runner from one look at it. It is a leaf: it
// decides nothing about a pool's other runners and writes nothing.
package runnerstate
