package runnerpool

import (
	"testing"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/scalesetlistener"
)

// A scale-set pool scales to GitHub's assigned jobs within its floor and
// maxReplicas, and until the session has stated them (a new leader, a
// session not yet open) it holds the runners it has: retiring idle runners
// then would throw away machines the jobs GitHub already assigned are
// about to take.
func TestScaleSetDesired(t *testing.T) {
	runners := func(n int) []*hypervisorv1alpha1.MachineClaim {
		out := make([]*hypervisorv1alpha1.MachineClaim, n)
		for i := range out {
			out[i] = &hypervisorv1alpha1.MachineClaim{}
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		min, max int32
		idle     int
		view     *scalesetlistener.View
		want     int
	}{
		{"assigned jobs", 0, 10, 0, &scalesetlistener.View{Known: true, Assigned: 4}, 4},
		{"assigned above max", 0, 3, 0, &scalesetlistener.View{Known: true, Assigned: 9}, 3},
		{"floor above assigned", 2, 10, 0, &scalesetlistener.View{Known: true, Assigned: 1}, 2},
		{"nothing assigned: idle runners may go", 0, 10, 3, &scalesetlistener.View{Known: true}, 0},
		{"not stated yet: holds its runners", 0, 10, 3, &scalesetlistener.View{}, 3},
		{"no listener yet: holds its runners", 1, 10, 2, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &hypervisorv1alpha1.RunnerPool{Spec: hypervisorv1alpha1.RunnerPoolSpec{MinReplicas: tc.min, MaxReplicas: tc.max,
				GitHub: hypervisorv1alpha1.GitHubRunnerScope{ScaleSet: &hypervisorv1alpha1.ScaleSetSpec{Name: "linux"}}}}
			s := &scope{pool: pool, listened: tc.view, demand: &poolDemand{}}
			if got := (&Reconciler{}).desired(s, observed{idle: runners(tc.idle)}); got != tc.want {
				t.Errorf("desired %d, want %d", got, tc.want)
			}
		})
	}
}
