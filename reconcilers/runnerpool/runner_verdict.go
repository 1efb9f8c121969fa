package runnerpool

import (
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// runnerLook is one runner as one reconcile sees it: its claim, its
// registration in the listing, what its notes and its job's record say.
// Nothing in it is about the pool's other runners, so each runner's
// verdict can be made by whichever reconciler owns that runner.
type runnerLook struct {
	claim *hypervisorv1alpha1.MachineClaim
	// runner is its registration, when registered.
	runner     github.Runner
	registered bool
	// seenOnline: its runner was seen online before (seenOnlineAnnotation).
	seenOnline bool
	// jobCompleted: a record says its job completed (finishedRunners).
	jobCompleted bool
	// listedAt is when the listing that runner came from started.
	listedAt time.Time
	now      time.Time
}

// runnerState is how the pool counts a runner.
type runnerState int

const (
	// runnerPending: starting, not online yet.
	runnerPending runnerState = iota
	runnerIdle
	runnerBusy
	// runnerNone: no runner for the pool's jobs any more (gone, finished,
	// or both).
	runnerNone
)

// verdict is what a look makes of a runner.
type verdict struct {
	state runnerState
	// online: the runner is online in this look (noted, observe).
	online bool
	// gone: the runner is over and is to be retired, its registration and
	// machine removed (unless held as finished, holdFinished).
	gone bool
	// finished: the runner ran its job (an ephemeral runner runs one).
	finished bool
	// timedOut: gone because it never came online in registrationTimeout.
	timedOut bool
}

// judge makes the verdict on one runner of pool. The order of the cases is
// the order of precedence: an ended machine over anything GitHub says, a
// runner online over its age, a runner known to have run over the
// registration timeout.
func judge(pool *hypervisorv1alpha1.RunnerPool, l runnerLook) verdict {
	c, rn, registered := l.claim, l.runner, l.registered
	age := l.now.Sub(createdAt(c))
	switch {
	case terminalPhase(c):
		return verdict{state: runnerNone, gone: true, finished: ranJob(pool, c, registered, l.seenOnline)}
	case registered && rn.Online() && rn.Busy:
		return verdict{state: runnerBusy, online: true}
	case registered && rn.Online():
		if d := maxLifetime(pool); d > 0 && age > d {
			return verdict{state: runnerNone, online: true, gone: true} // retired once idle, never mid-job
		}
		if !labelsCover(rn.Labels, RunnerLabels(pool)) {
			// Registered before the pool's labels changed: it cannot take
			// the jobs the pool now takes, yet would count as their runner.
			// Retired once idle, never mid-job, and replaced.
			return verdict{state: runnerNone, online: true, gone: true}
		}
		return verdict{state: runnerIdle, online: true}
	case !registered && (l.seenOnline || l.jobCompleted):
		// An ephemeral runner deregisters itself after its job: the machine
		// has nothing more to do. One whose job is recorded Completed ran,
		// even if no shared listing saw it online.
		return verdict{state: runnerNone, gone: true, finished: true}
	case age > registrationTimeout(pool):
		return verdict{state: runnerNone, gone: true, timedOut: true}
	case !registered && pool.Spec.RegistrationMethod != hypervisorv1alpha1.RegistrationToken && listedAfter(l.listedAt, c):
		// A JIT registration exists from before the claim was made until
		// the runner removes it after its job (ranJob): this runner ran its
		// job between two looks and its machine is stopping. It is no
		// longer a runner for the queued jobs; counted as pending until its
		// machine was seen ended, such runners held up to 224 of a 500-job
		// burst and the last 35 jobs waited about 30 s (RUNNERS_N=500 go
		// test -bench RunnerLatency ./internal/bench/runners/). It stands
		// for a queued record like any finished runner, and is retired once
		// its machine ended, never while it may still run (or, should its
		// machine never end, at the registration timeout). The listing is
		// the one pools share, and may be older than the claim: only one
		// that started after the claim was made had to show its
		// registration (listedAfter).
		return verdict{state: runnerNone, finished: true}
	default:
		return verdict{state: runnerPending}
	}
}
