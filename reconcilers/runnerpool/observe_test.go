package runnerpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// A JIT runner's registration exists from before its claim was made until
// it removes it after its one job. A running claim whose registration is
// gone ran its job between two looks: it is finished (it stands for a
// queued record if none names it) and no longer counts as a runner for the
// queued jobs, but is not retired until its machine is seen ended. A
// registration-token runner registers only once booted, so its absence
// means pending; so does a JIT runner's in a (shared) listing that started
// before its claim was made.
func TestObserveJITRunnerGoneBetweenLooks(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name             string
		method           hypervisorv1alpha1.RegistrationMethod
		listedAt         time.Time
		pending, current int
		finished, gone   int
	}{
		{"JIT", hypervisorv1alpha1.JITConfig, now, 1, 1, 1, 0},
		{"JITListingOlderThanTheClaims", hypervisorv1alpha1.JITConfig, now.Add(-30 * time.Second), 2, 2, 0, 0},
		{"RegistrationToken", hypervisorv1alpha1.RegistrationToken, now, 2, 2, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "0123456789abcdef"}}
			pool.Spec.RegistrationMethod = c.method
			claim := func(name string) hypervisorv1alpha1.MachineClaim {
				m := hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(now.Add(-10 * time.Second))}}
				m.Status.Phase = hypervisorv1alpha1.MachineRunning
				return m
			}
			claims := []hypervisorv1alpha1.MachineClaim{claim("p-booting"), claim("p-done")}
			// p-booting's registration is there (offline: not started yet);
			// p-done's runner ran its job and removed its registration.
			runners := []github.Runner{{ID: 1, Name: "p-booting", Status: github.RunnerOffline, Labels: []string{runnerstate.PoolRunnerLabel(pool)}}}
			if c.method == hypervisorv1alpha1.RegistrationToken {
				runners = nil // neither has registered yet
			}
			s := &scope{pool: pool, now: now, listedAt: c.listedAt, mem: &poolMemory{creating: map[string]time.Time{}}}
			obs := (&Reconciler{}).observe(s, claims, runners)
			if len(obs.pending) != c.pending || obs.current() != c.current || len(obs.finished) != c.finished || len(obs.gone) != c.gone {
				t.Fatalf("pending %d, current %d, finished %d, gone %d; want %d, %d, %d, %d",
					len(obs.pending), obs.current(), len(obs.finished), len(obs.gone), c.pending, c.current, c.finished, c.gone)
			}
		})
	}
}
