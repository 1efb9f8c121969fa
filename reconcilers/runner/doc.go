// Package runner looks after each runner of every RunnerPool, one
// reconcile per runner MachineClaim (as actions-runner-controller's
// EphemeralRunner controller looks after one runner): it notes what GitHub
// shows of the runner on its claim, and retires it when it is over —
// finished, never online within the registration timeout, past its
// lifetime, on an ended machine, or scaled away by its pool — by removing
// its registration, then its claim and bootstrap Secret. The pool
// (reconcilers/runnerpool) only counts runners and makes them; it asks for
// a scale-down by annotating the claim (runnerstate.RetireAnnotation).
package runner
