package performer

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// readiness sets the original Hourglass operator's status fields, which
// its executor reads: ready (it waits for true before it dials the
// performer, and deletes it after five minutes without), readyTime and
// lastUpgrade. Each changes only with a transition the conditions show
// anyway, so they cost no status write of their own.
func readiness(s *scope) {
	st := &s.perf.Status
	ready := s.serving != nil && s.serviceConflict == nil
	if ready && !st.Ready {
		st.ReadyTime = &metav1.Time{Time: s.now}
	}
	st.Ready = ready
	if s.upgraded {
		st.LastUpgrade = &metav1.Time{Time: s.now}
	}
}
