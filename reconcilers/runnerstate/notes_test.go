package runnerstate

import (
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// Each note is written on the transition that makes it true, removed on
// the one that makes it false, and never written again by a steady look.
func TestNotesToWrite(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := FormatTime(now.Add(-time.Minute))
	claim := func(notes ...string) *hypervisorv1alpha1.MachineClaim {
		c := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-a", Annotations: map[string]string{}}}
		for _, k := range notes {
			c.Annotations[k] = at
		}
		return c
	}
	stamp := FormatTime(now)
	idle, busy := Verdict{State: Idle, Online: true}, Verdict{State: Busy, Online: true}
	finished := Verdict{State: None, Gone: true, Finished: true}
	for _, c := range []struct {
		name  string
		claim *hypervisorv1alpha1.MachineClaim
		v     Verdict
		named bool
		want  map[string]any
	}{
		{"FirstSeenIdle", claim(), idle, false, map[string]any{SeenOnlineAnnotation: stamp, IdleSinceAnnotation: stamp}},
		{"SteadyIdle", claim(SeenOnlineAnnotation, IdleSinceAnnotation), idle, false, map[string]any{}},
		{"FirstSeenBusy", claim(), busy, false, map[string]any{SeenOnlineAnnotation: stamp}},
		{"BusyAgain", claim(SeenOnlineAnnotation, IdleSinceAnnotation), busy, false, map[string]any{IdleSinceAnnotation: nil}},
		{"SteadyBusy", claim(SeenOnlineAnnotation), busy, false, map[string]any{}},
		{"FinishedUnrecorded", claim(SeenOnlineAnnotation), finished, false, map[string]any{FinishedAtAnnotation: stamp}},
		{"FinishedRecorded", claim(SeenOnlineAnnotation), finished, true, map[string]any{}},
		{"HeldSteady", claim(FinishedAtAnnotation), finished, false, map[string]any{}},
		{"NoLongerFinished", claim(FinishedAtAnnotation), Verdict{State: Pending}, false, map[string]any{FinishedAtAnnotation: nil}},
		{"UnparsableNoteIsNotedAgain", func() *hypervisorv1alpha1.MachineClaim {
			c := claim(SeenOnlineAnnotation)
			c.Annotations[IdleSinceAnnotation] = "by hand"
			return c
		}(), idle, false, map[string]any{IdleSinceAnnotation: stamp}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := NotesToWrite(c.claim, c.v, c.named, now); !maps.Equal(got, c.want) {
				t.Fatalf("NotesToWrite = %v, want %v", got, c.want)
			}
		})
	}
}
