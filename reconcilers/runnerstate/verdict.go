package runnerstate

import (
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// Look is one runner as one reconcile sees it: its claim, its registration
// in the listing, what its notes and its job's record say. Nothing in it
// is about the pool's other runners, so the pool (counting) and the
// runner's own reconciler (acting) make the same verdict from it.
type Look struct {
	Claim *hypervisorv1alpha1.MachineClaim
	// Runner is its registration, when Registered.
	Runner     github.Runner
	Registered bool
	// JobCompleted: a record says its job completed.
	JobCompleted bool
	// ListedAt is when the listing Runner came from started.
	ListedAt time.Time
	Now      time.Time
}

// State is how the pool counts a runner.
type State int

const (
	// Pending: starting, not online yet.
	Pending State = iota
	Idle
	Busy
	// None: no runner for the pool's jobs any more (gone, finished, or
	// both).
	None
)

// Verdict is what a look makes of a runner.
type Verdict struct {
	State State
	// Online: the runner is online in this look (noted by its reconciler).
	Online bool
	// Gone: the runner is over and is to be retired, its registration and
	// machine removed (unless Held as finished).
	Gone bool
	// Finished: the runner ran its job (an ephemeral runner runs one).
	Finished bool
	// TimedOut: gone because it never came online in RegistrationTimeout.
	TimedOut bool
}

// Judge makes the verdict on one runner of pool. The order of the cases is
// the order of precedence: an ended machine over anything GitHub says, a
// runner online over its age, a runner known to have run over the
// registration timeout.
func Judge(pool *hypervisorv1alpha1.RunnerPool, l Look) Verdict {
	c, rn, registered := l.Claim, l.Runner, l.Registered
	_, seenOnline := c.Annotations[SeenOnlineAnnotation]
	age := l.Now.Sub(CreatedAt(c))
	switch {
	case TerminalPhase(c) && registered && !listedAfterEnd(l.ListedAt, c):
		// An ephemeral runner removes its registration after its job and
		// then its machine powers off, so the claim shows the end at once
		// while a listing from before it still shows the registration.
		// Judged on it, a finished runner would look like one whose machine
		// died under it, and be retired instead of held for its job: wait
		// for a listing that started after the end.
		return Verdict{State: None}
	case TerminalPhase(c):
		return Verdict{State: None, Gone: true, Finished: ranJob(pool, c, registered, seenOnline)}
	case registered && rn.Online() && rn.Busy:
		return Verdict{State: Busy, Online: true}
	case registered && rn.Online():
		if d := MaxLifetime(pool); d > 0 && age > d {
			return Verdict{State: None, Online: true, Gone: true} // retired once idle, never mid-job
		}
		if !LabelsCover(rn.Labels, RunnerLabels(pool)) {
			// Registered before the pool's labels changed: it cannot take
			// the jobs the pool now takes, yet would count as their runner.
			// Retired once idle, never mid-job, and replaced.
			return Verdict{State: None, Online: true, Gone: true}
		}
		return Verdict{State: Idle, Online: true}
	case !registered && (seenOnline || l.JobCompleted):
		// An ephemeral runner deregisters itself after its job: the machine
		// has nothing more to do. One whose job is recorded Completed ran,
		// even if no shared listing saw it online.
		return Verdict{State: None, Gone: true, Finished: true}
	case age > RegistrationTimeout(pool):
		return Verdict{State: None, Gone: true, TimedOut: true}
	case !registered && pool.Spec.RegistrationMethod != hypervisorv1alpha1.RegistrationToken && ListedAfter(l.ListedAt, c):
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
		// registration (ListedAfter).
		return Verdict{State: None, Finished: true}
	default:
		return Verdict{State: Pending}
	}
}

// ranJob reports whether a claim whose machine ended ran a job: its runner
// was seen online and is no longer registered (it deregistered itself after
// its job). A process that never saw it online (a new leader) takes a JIT
// runner's missing registration as the same sign: a JIT registration exists
// from the claim's creation until the runner removes it after its job.
func ranJob(pool *hypervisorv1alpha1.RunnerPool, c *hypervisorv1alpha1.MachineClaim, registered, seenOnline bool) bool {
	if registered || c.Status.Phase != hypervisorv1alpha1.MachineTerminated {
		return false
	}
	return seenOnline || pool.Spec.RegistrationMethod != hypervisorv1alpha1.RegistrationToken
}

// listedAfterEnd reports whether a listing started at listedAt began after
// c's machine ended: the Ready condition's last transition, the API
// server's time to the second, with a second's margin as ListedAfter. A
// claim that does not say when (no Ready condition) counts as ended long
// ago.
func listedAfterEnd(listedAt time.Time, c *hypervisorv1alpha1.MachineClaim) bool {
	ready := apimeta.FindStatusCondition(c.Status.Conditions, meta.ReadyCondition)
	if ready == nil {
		return true
	}
	return !listedAt.IsZero() && ready.LastTransitionTime.Add(time.Second).Before(listedAt)
}
