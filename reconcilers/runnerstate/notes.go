package runnerstate

import (
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// What is learned of a runner is written on the runner's claim, so a
// restart or a new leader decides as the process that learned it would
// have: an idle runner's TTL does not start again, a runner seen online is
// still known to have been, a finished runner's hold does not start again.
// The runner reconciler writes the first three, each when it changes,
// never on a steady reconcile; the pool writes RetireAnnotation. The times
// are the reconciler's clock, as CreatedAtAnnotation's. They are notes
// (hypervisorv1alpha1.NotesAnnotationPrefix): the claim's own reconciler
// does not wake for them.
const (
	// IdleSinceAnnotation: when the runner was first seen online and idle
	// since it was last seen busy; removed once it is seen busy.
	IdleSinceAnnotation = hypervisorv1alpha1.NotesAnnotationPrefix + "runner-idle-since"
	// SeenOnlineAnnotation: when the runner was first seen online. An
	// ephemeral runner that was online and is no longer registered ran its
	// job.
	SeenOnlineAnnotation = hypervisorv1alpha1.NotesAnnotationPrefix + "runner-seen-online"
	// FinishedAtAnnotation: when the finished runner was first held back
	// from retirement for a queued record (Held).
	FinishedAtAnnotation = hypervisorv1alpha1.NotesAnnotationPrefix + "runner-finished-at"
	// RetireAnnotation: the pool asks the runner's reconciler to retire an
	// idle runner it scales away; its value is when it asked. The runner
	// reconciler checks the runner is still idle right before removing its
	// registration, and takes the request back if it took a job.
	RetireAnnotation = hypervisorv1alpha1.NotesAnnotationPrefix + "runner-retire"
	// DeregistrationFailedAnnotation: when removing the retiring runner's
	// registration last failed; it is retried, and the pool counts it in
	// status.pendingDeregistrations until the claim is gone.
	DeregistrationFailedAnnotation = hypervisorv1alpha1.NotesAnnotationPrefix + "runner-deregistration-failed"
)

// RunnerNoteKeys are the notes the runner reconciler writes.
var RunnerNoteKeys = []string{IdleSinceAnnotation, SeenOnlineAnnotation, FinishedAtAnnotation, DeregistrationFailedAnnotation}

// NoteTime reads one of c's notes as a time; one that does not parse (set
// by hand) reads as absent, so it is noted again.
func NoteTime(c *hypervisorv1alpha1.MachineClaim, key string) (time.Time, bool) {
	v, ok := c.Annotations[key]
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// FormatTime is how a note holds a time.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// RetireRequested reports whether the pool asked for c's retirement.
func RetireRequested(c *hypervisorv1alpha1.MachineClaim) bool {
	_, ok := c.Annotations[RetireAnnotation]
	return ok
}

// Held reports whether finished runner c is kept standing a while longer
// for one of its pool's queued records, because no record names its runner
// yet (named): its claim is what carries that across a failover. Until
// the runner reconciler noted when it was first held, it is held.
func Held(c *hypervisorv1alpha1.MachineClaim, named bool, now time.Time) bool {
	if named {
		return false
	}
	at, ok := NoteTime(c, FinishedAtAnnotation)
	return !ok || now.Sub(at) < FinishedGrace
}

// NotesToWrite is what runner c's notes should change by, judged v at now:
// seen online, idle since (until seen busy), finished and held for a
// queued record (named: a record names its runner). A note it carries
// already is never written again, so a steady runner costs no write.
func NotesToWrite(c *hypervisorv1alpha1.MachineClaim, v Verdict, named bool, now time.Time) map[string]any {
	set := map[string]any{}
	stamp := func(key string) {
		if _, ok := NoteTime(c, key); !ok {
			set[key] = FormatTime(now)
		}
	}
	unset := func(key string) {
		if _, ok := c.Annotations[key]; ok {
			set[key] = nil
		}
	}
	if v.Online {
		stamp(SeenOnlineAnnotation)
		if v.State == Busy {
			unset(IdleSinceAnnotation)
		} else {
			stamp(IdleSinceAnnotation)
		}
	}
	switch {
	case v.Finished && !named:
		stamp(FinishedAtAnnotation)
	case !v.Finished:
		// No longer finished: should it finish again, its hold starts
		// afresh.
		unset(FinishedAtAnnotation)
	}
	return set
}

// Retires reports whether runner c, judged v, is retired now: it is over,
// and not a finished runner held for a queued record (Held).
func Retires(c *hypervisorv1alpha1.MachineClaim, v Verdict, named bool, now time.Time) bool {
	return v.Gone && (!v.Finished || !Held(c, named, now))
}
