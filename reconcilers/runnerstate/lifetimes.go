package runnerstate

import (
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// IdleTTL is how long a runner may stay idle before the pool may remove it
// above its desired count.
func IdleTTL(p *hypervisorv1alpha1.RunnerPool) time.Duration {
	if d := p.Spec.IdleTTL; d != nil {
		return d.Duration
	}
	return 10 * time.Minute
}

// MaxLifetime is how long a runner may live; past it an idle runner is
// retired and replaced, never one mid-job.
func MaxLifetime(p *hypervisorv1alpha1.RunnerPool) time.Duration {
	if d := p.Spec.MaxLifetime; d != nil {
		return d.Duration
	}
	return 24 * time.Hour
}

// RegistrationTimeout is how long a runner may take to come online.
func RegistrationTimeout(p *hypervisorv1alpha1.RunnerPool) time.Duration {
	if d := p.Spec.RegistrationTimeout; d != nil {
		return d.Duration
	}
	return 15 * time.Minute
}

// FinishedGrace bounds how long a finished runner whose job no record names
// is kept standing for a queued record: its job's deliveries normally land
// within seconds, a lost one is redelivered or the poll (every minute by
// default) catches up; past this the record is taken at its word.
const FinishedGrace = 2 * time.Minute

// CreatedAt is when the pool made c: its annotation, or, for a claim made
// before the annotation existed, its creationTimestamp.
func CreatedAt(c *hypervisorv1alpha1.MachineClaim) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, c.Annotations[CreatedAtAnnotation]); err == nil {
		return t
	}
	return c.CreationTimestamp.Time
}

// TerminalPhase reports whether a claim's machine ended.
func TerminalPhase(c *hypervisorv1alpha1.MachineClaim) bool {
	return c.Status.Phase == hypervisorv1alpha1.MachineTerminated || c.Status.Phase == hypervisorv1alpha1.MachineFailed
}

// ListedAfter reports whether a listing started at listedAt began after
// claim c was made, so it shows the JIT registration made before c if that
// registration still exists. The claim's creationTimestamp is the API
// server's, to the second: a second's margin keeps a claim made just
// before the listing pending rather than finished.
func ListedAfter(listedAt time.Time, c *hypervisorv1alpha1.MachineClaim) bool {
	return !listedAt.IsZero() && c.CreationTimestamp.Add(time.Second).Before(listedAt)
}
