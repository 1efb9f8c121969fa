package standby_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

func TestPlanFollowsTheLastScheduleToFire(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	spec := &hypervisorv1alpha1.StandbySpec{Hot: 1, Schedules: []hypervisorv1alpha1.StandbySchedule{
		{Name: "workday", Start: "0 8 * * 1-5", TimeZone: "Europe/Berlin", Hot: 5},
		{Name: "evening", Start: "0 18 * * 1-5", TimeZone: "Europe/Berlin", Hot: 0},
	}}
	// 2026-12-02 is a Wednesday.
	for _, tc := range []struct {
		name     string
		now      time.Time
		want     int32
		schedule string
	}{
		{"Wednesday morning", time.Date(2026, 12, 2, 10, 0, 0, 0, berlin), 5, "workday"},
		{"the minute it starts", time.Date(2026, 12, 2, 8, 0, 0, 0, berlin), 5, "workday"},
		{"a minute before", time.Date(2026, 12, 2, 7, 59, 0, 0, berlin), 0, "evening"},
		{"Wednesday night", time.Date(2026, 12, 2, 22, 0, 0, 0, berlin), 0, "evening"},
		{"Saturday: Friday evening's window goes on", time.Date(2026, 12, 5, 12, 0, 0, 0, berlin), 0, "evening"},
		{"Monday 08:00 in Berlin is 07:00 UTC", time.Date(2026, 12, 7, 7, 30, 0, 0, time.UTC), 5, "workday"},
	} {
		p, err := standby.PlanFor(spec, nil, 0, tc.now)
		if err != nil || p.Want != tc.want || p.Schedule != tc.schedule {
			t.Errorf("%s: %+v, %v; want %d from %q", tc.name, p, err, tc.want, tc.schedule)
		}
		if p.Recheck <= 0 || p.Recheck > 7*24*time.Hour {
			t.Errorf("%s: recheck in %s; want by the next window's start", tc.name, p.Recheck)
		}
	}
	// None fired within the look-back (a yearly window, months ago): hot.
	yearly := &hypervisorv1alpha1.StandbySpec{Hot: 2, Schedules: []hypervisorv1alpha1.StandbySchedule{{Name: "newyear", Start: "0 0 1 1 *", Hot: 9}}}
	if p, err := standby.PlanFor(yearly, nil, 0, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)); err != nil || p.Want != 2 || p.Schedule != "" {
		t.Errorf("no window in force: %+v, %v; want spec.standby.hot", p, err)
	}
}

func TestPlanRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct {
		sc   hypervisorv1alpha1.StandbySchedule
		want string
	}{
		{hypervisorv1alpha1.StandbySchedule{Name: "a", Start: "every morning", Hot: 1}, "spec.standby.schedules[0]: start \"every morning\" is not a five-field cron expression"},
		{hypervisorv1alpha1.StandbySchedule{Name: "a", Start: "0 8 * * *", TimeZone: "Mars/Olympus", Hot: 1}, "spec.standby.schedules[0]: timeZone \"Mars/Olympus\" is not an IANA time zone"},
		{hypervisorv1alpha1.StandbySchedule{Name: "a", Start: "CRON_TZ=UTC 0 8 * * *", Hot: 1}, "give the time zone in timeZone"},
	} {
		_, err := standby.PlanFor(&hypervisorv1alpha1.StandbySpec{Schedules: []hypervisorv1alpha1.StandbySchedule{tc.sc}}, nil, 0, time.Now())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.sc, err, tc.want)
		}
	}
}

func TestBurstHeadroomDecays(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	spec := &hypervisorv1alpha1.StandbySpec{Hot: 1, BurstHeadroom: &hypervisorv1alpha1.BurstHeadroom{Max: 10, HalfLife: &metav1.Duration{Duration: 30 * time.Minute}}}
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	for _, tc := range []struct {
		name      string
		prev      *hypervisorv1alpha1.StandbyStatus
		inUse     int32
		want      int32
		peak      int32
		peakIsNow bool
	}{
		{"a burst of 8 is the new peak", nil, 8, 9, 8, true},
		{"more than max is max", nil, 40, 11, 10, true},
		{"one half-life after a peak of 8", &hypervisorv1alpha1.StandbyStatus{HeadroomPeak: 8, HeadroomSince: at(30 * time.Minute)}, 0, 5, 8, false},
		{"two half-lives", &hypervisorv1alpha1.StandbyStatus{HeadroomPeak: 8, HeadroomSince: at(time.Hour)}, 1, 3, 8, false},
		{"claims above what is left make a new peak", &hypervisorv1alpha1.StandbyStatus{HeadroomPeak: 8, HeadroomSince: at(time.Hour)}, 6, 7, 6, true},
		{"an idle night: nothing left", &hypervisorv1alpha1.StandbyStatus{HeadroomPeak: 8, HeadroomSince: at(8 * time.Hour)}, 0, 1, 0, false},
	} {
		p, err := standby.PlanFor(spec, tc.prev, tc.inUse, now)
		if err != nil || p.Want != tc.want || p.Peak != tc.peak {
			t.Errorf("%s: %+v, %v; want %d hot, peak %d", tc.name, p, err, tc.want, tc.peak)
			continue
		}
		if tc.peakIsNow != (p.Since != nil && p.Since.Time.Equal(now)) {
			t.Errorf("%s: peak since %v", tc.name, p.Since)
		}
		if p.Peak > 0 && p.Recheck <= 0 {
			t.Errorf("%s: no recheck while headroom is left", tc.name)
		}
	}
	// Capped at 100 in all.
	big := &hypervisorv1alpha1.StandbySpec{Hot: 95, BurstHeadroom: &hypervisorv1alpha1.BurstHeadroom{Max: 50}}
	if p, _ := standby.PlanFor(big, nil, 50, now); p.Want != standby.MaxHot {
		t.Errorf("95 hot and a headroom of 50: want %d, capped at %d", p.Want, standby.MaxHot)
	}
}
