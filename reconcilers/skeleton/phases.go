package skeleton

import (
	"context"
	"errors"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Phase is one ordered step of a reconcile over its scope S (what the
// reconcile has read and observed so far).
type Phase[S any] func(ctx context.Context, s S) (Result, error)

// Result is what one phase asks of the reconcile.
type Result struct {
	// RequeueAfter asks to look again this soon; the shortest non-zero
	// request of all phases wins.
	RequeueAfter time.Duration
	// Stop ends the reconcile after this phase: the phases after it depend
	// on something this one could not establish (a missing template, a
	// machine still being made), or have nothing left to do.
	Stop bool
}

// Continue is the result of a phase that finished its part.
func Continue() Result { return Result{} }

// Requeue asks to look again after d, and lets the later phases run.
func Requeue(d time.Duration) Result { return Result{RequeueAfter: d} }

// StopAndRequeue ends the reconcile and asks to look again after d.
func StopAndRequeue(d time.Duration) Result { return Result{RequeueAfter: d, Stop: true} }

// Stop ends the reconcile without asking to look again.
func Stop() Result { return Result{Stop: true} }

// RunPhases runs phases in order. An error is collected and the later
// phases still run, unless the failing phase also asked to stop (its
// successors depend on it); once any phase failed, requeue requests are
// ignored and the joined errors returned, so controller-runtime's rate
// limiter paces the retry. Otherwise the shortest requeue wins.
func RunPhases[S any](ctx context.Context, s S, phases ...Phase[S]) (ctrl.Result, error) {
	var (
		errs  []error
		after time.Duration
	)
	for _, phase := range phases {
		res, err := phase(ctx, s)
		if err != nil {
			errs = append(errs, err)
		} else if len(errs) == 0 {
			after = Shortest(after, res.RequeueAfter)
		}
		if res.Stop {
			break
		}
	}
	if len(errs) > 0 {
		return ctrl.Result{}, errors.Join(errs...)
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// Shortest returns the shorter of two requeue delays, where zero means
// "no request".
func Shortest(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
