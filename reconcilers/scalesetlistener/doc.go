// Package scalesetlistener holds the message sessions of the installation's
// runner scale sets: one per scale set, on the leader only, each turning
// GitHub's statistics into the demand its RunnerPool scales to.
//
// The pool's reconciler says which scale sets to listen to (Ensure, Stop);
// the listeners tell it back through Wake and Demand. Nothing here must
// survive a restart or a leader change: a new leader opens the session
// again, and the session's first statistics restate the whole demand.
package scalesetlistener
