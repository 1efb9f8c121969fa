package standby

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

func TestSort(t *testing.T) {
	base := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	claim := func(name string, age int, phase hypervisorv1alpha1.MachinePhase, mutate ...func(*hypervisorv1alpha1.MachineClaim)) hypervisorv1alpha1.MachineClaim {
		c := hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(base.Add(-time.Duration(age) * time.Minute)),
			Annotations: map[string]string{GenerationAnnotation: "2"}}}
		c.Status.Phase = phase
		for _, m := range mutate {
			m(&c)
		}
		return c
	}
	old := func(c *hypervisorv1alpha1.MachineClaim) { c.Annotations[GenerationAnnotation] = "1" }
	bound := func(c *hypervisorv1alpha1.MachineClaim) { c.Annotations[BoundToAnnotation] = "u/taker/1" }
	gone := func(c *hypervisorv1alpha1.MachineClaim) { now := metav1.NewTime(base); c.DeletionTimestamp = &now }
	free := func(c *hypervisorv1alpha1.MachineClaim) bool {
		return c.Status.Phase == hypervisorv1alpha1.MachineReady
	}
	current := func(c *hypervisorv1alpha1.MachineClaim) bool { return c.Annotations[GenerationAnnotation] == "2" }
	names := func(cs []*hypervisorv1alpha1.MachineClaim) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	const ready, starting = hypervisorv1alpha1.MachineReady, hypervisorv1alpha1.MachineProvisioning
	for _, tc := range []struct {
		name               string
		claims             []hypervisorv1alpha1.MachineClaim
		want               int
		hot, start, retire []string
		binding            int32
		make               int
	}{
		{name: "none kept, some wanted", want: 3, make: 3},
		{name: "ended, failed, stopping and stale ones are replaced", want: 2,
			claims: []hypervisorv1alpha1.MachineClaim{claim("t", 9, hypervisorv1alpha1.MachineTerminated), claim("f", 8, hypervisorv1alpha1.MachineFailed),
				claim("s", 7, hypervisorv1alpha1.MachineStopping), claim("o", 6, ready, old), claim("h", 5, ready)},
			hot: []string{"h"}, retire: []string{"t", "f", "s", "o"}, make: 1},
		{name: "extra: starting ones go first, then the youngest hot", want: 1,
			claims: []hypervisorv1alpha1.MachineClaim{claim("young", 1, ready), claim("oldest", 9, ready), claim("boot", 2, starting)},
			hot:    []string{"oldest"}, retire: []string{"boot", "young"}},
		{name: "bound ones are counted, not kept; deleted ones skipped", want: 1,
			claims: []hypervisorv1alpha1.MachineClaim{claim("b", 3, ready, bound), claim("d", 3, ready, gone), claim("s", 1, starting)},
			start:  []string{"s"}, binding: 1},
		{name: "want zero retires every free one", want: 0,
			claims: []hypervisorv1alpha1.MachineClaim{claim("a", 3, ready), claim("b", 2, starting)},
			retire: []string{"b", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Sort(tc.claims, tc.want, free, current)
			if g := names(got.Hot); !slices.Equal(g, tc.hot) {
				t.Errorf("hot %v, want %v", g, tc.hot)
			}
			if g := names(got.Starting); !slices.Equal(g, tc.start) {
				t.Errorf("starting %v, want %v", g, tc.start)
			}
			if g := names(got.Retire); !slices.Equal(g, tc.retire) {
				t.Errorf("retire %v, want %v", g, tc.retire)
			}
			if got.Binding != tc.binding || got.Make != tc.make {
				t.Errorf("binding %d make %d, want %d and %d", got.Binding, got.Make, tc.binding, tc.make)
			}
		})
	}
}

func TestLifetimeSpreadsBelowTheAgeLimit(t *testing.T) {
	seen := map[time.Duration]bool{}
	for _, name := range []string{"a-standby-1", "a-standby-2", "a-standby-3", "a-standby-4"} {
		life := Lifetime(name, 24*time.Hour)
		if life > 24*time.Hour || life < 24*time.Hour*9/10 || life != life.Truncate(time.Second) {
			t.Errorf("%s: lifetime %v, want whole seconds within the last tenth below 24h", name, life)
		}
		seen[life] = true
	}
	if len(seen) < 2 {
		t.Errorf("four names share one lifetime: %v", seen)
	}
}
