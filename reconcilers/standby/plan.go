package standby

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// MaxHot bounds the machines one template keeps hot, schedules and
// headroom together.
const MaxHot = 100

// DefaultHalfLife is the burst headroom's half-life when the template
// sets none.
const DefaultHalfLife = 30 * time.Minute

// lookBack is how far back a schedule's last firing is looked for: a
// weekly window is found, and a restart inside it keeps it.
const lookBack = 8 * 24 * time.Hour

// Plan is how many machines a template keeps hot now, and why.
type Plan struct {
	// Want is the schedule's (or spec.standby.hot) plus the headroom.
	Want int32
	// Schedule is the window in force, "" for spec.standby.hot.
	Schedule string
	// Peak and Since are the headroom's state, kept in status so a
	// restart or a new leader goes on decaying it.
	Peak  int32
	Since *metav1.Time
	// Recheck is when to work it out again: the next schedule's start, or
	// the headroom's next step down; 0 for never.
	Recheck time.Duration
}

// PlanFor works out the plan at now for a template whose spec.standby is
// spec, whose status held prev, and which has inUse claims (not standby
// ones) that are not over. An error names the field at fault.
func PlanFor(spec *hypervisorv1alpha1.StandbySpec, prev *hypervisorv1alpha1.StandbyStatus, inUse int32, now time.Time) (Plan, error) {
	var p Plan
	if spec == nil {
		return p, nil
	}
	p.Want = spec.Hot
	var last time.Time
	for i, sc := range spec.Schedules {
		field := fmt.Sprintf("spec.standby.schedules[%d]", i)
		sched, err := parse(sc)
		if err != nil {
			return Plan{}, fmt.Errorf("%s: %w", field, err)
		}
		if fired, ok := lastFiring(sched, now); ok && fired.After(last) {
			last, p.Want, p.Schedule = fired, sc.Hot, sc.Name
		}
		if next := sched.Next(now).Sub(now); p.Recheck == 0 || next < p.Recheck {
			p.Recheck = next
		}
	}
	if h := spec.BurstHeadroom; h != nil {
		extra, recheck := p.headroom(h, prev, inUse, now)
		p.Want += extra
		if recheck > 0 && (p.Recheck == 0 || recheck < p.Recheck) {
			p.Recheck = recheck
		}
	}
	p.Want = min(p.Want, MaxHot)
	return p, nil
}

// headroom decays the last peak by its half-life, takes inUse as the new
// peak when it is above what is left, and returns the extra machines (the
// peak left, rounded, at most h.Max) and when it next steps down.
func (p *Plan) headroom(h *hypervisorv1alpha1.BurstHeadroom, prev *hypervisorv1alpha1.StandbyStatus, inUse int32, now time.Time) (int32, time.Duration) {
	half := DefaultHalfLife
	if h.HalfLife != nil && h.HalfLife.Duration > 0 {
		half = h.HalfLife.Duration
	}
	left := 0.0
	if prev != nil && prev.HeadroomSince != nil && prev.HeadroomPeak > 0 {
		p.Peak, p.Since = prev.HeadroomPeak, prev.HeadroomSince
		left = float64(prev.HeadroomPeak) * math.Exp2(-now.Sub(prev.HeadroomSince.Time).Seconds()/half.Seconds())
	}
	if peak := min(inUse, h.Max); float64(peak) > left {
		since := metav1.NewTime(now)
		p.Peak, p.Since, left = peak, &since, float64(peak)
	}
	extra := int32(math.Round(left))
	if extra <= 0 {
		p.Peak, p.Since = 0, nil
		return 0, 0
	}
	// It steps down when what is left falls below extra - 0.5.
	step := time.Duration(math.Log2(left/(float64(extra)-0.5)) * float64(half))
	return min(extra, h.Max), max(step, time.Second)
}

// parse reads a schedule's five-field expression in its time zone.
func parse(sc hypervisorv1alpha1.StandbySchedule) (cron.Schedule, error) {
	if strings.Contains(sc.Start, "TZ=") {
		return nil, fmt.Errorf("start %q: give the time zone in timeZone, not in the expression", sc.Start)
	}
	loc := time.UTC
	if sc.TimeZone != "" {
		var err error
		if loc, err = time.LoadLocation(sc.TimeZone); err != nil {
			return nil, fmt.Errorf("timeZone %q is not an IANA time zone (e.g. Europe/Berlin)", sc.TimeZone)
		}
	}
	sched, err := cron.ParseStandard(sc.Start)
	if err != nil {
		return nil, fmt.Errorf("start %q is not a five-field cron expression (minute hour day-of-month month day-of-week): %w", sc.Start, err)
	}
	if s, ok := sched.(*cron.SpecSchedule); ok {
		s.Location = loc
	}
	return sched, nil
}

// lastFiring is the last time sched fired at or before now, within
// lookBack. It looks back an hour, then a day, then lookBack, so a
// schedule firing every minute costs an hour's firings, not a week's.
func lastFiring(sched cron.Schedule, now time.Time) (time.Time, bool) {
	for _, window := range []time.Duration{time.Hour, 24 * time.Hour, lookBack} {
		var last time.Time
		for t := sched.Next(now.Add(-window)); !t.IsZero() && !t.After(now); t = sched.Next(t) {
			last = t
		}
		if !last.IsZero() {
			return last, true
		}
	}
	return time.Time{}, false
}
