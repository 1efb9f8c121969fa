package runnerpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// Every verdict judge makes on one runner, from that runner alone.
func TestJudge(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pool := func(method hypervisorv1alpha1.RegistrationMethod) *hypervisorv1alpha1.RunnerPool {
		p := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
		p.Spec.RegistrationMethod = method
		return p
	}
	claim := func(phase hypervisorv1alpha1.MachinePhase, age time.Duration) *hypervisorv1alpha1.MachineClaim {
		c := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-a", CreationTimestamp: metav1.NewTime(now.Add(-age))}}
		c.Status.Phase = phase
		return c
	}
	jit, token := pool(hypervisorv1alpha1.JITConfig), pool(hypervisorv1alpha1.RegistrationToken)
	online := github.Runner{Name: "p-a", Status: github.RunnerOnline, Labels: RunnerLabels(jit)}
	busy := online
	busy.Busy = true
	stale := online
	stale.Labels = nil
	running, ended := hypervisorv1alpha1.MachineRunning, hypervisorv1alpha1.MachineTerminated
	for _, c := range []struct {
		name string
		pool *hypervisorv1alpha1.RunnerPool
		look runnerLook
		want verdict
	}{
		{"EndedUnregisteredJIT", jit, runnerLook{claim: claim(ended, time.Minute)}, verdict{state: runnerNone, gone: true, finished: true}},
		{"EndedUnregisteredTokenNeverOnline", token, runnerLook{claim: claim(ended, time.Minute)}, verdict{state: runnerNone, gone: true}},
		{"EndedUnregisteredTokenSeenOnline", token, runnerLook{claim: claim(ended, time.Minute), seenOnline: true}, verdict{state: runnerNone, gone: true, finished: true}},
		{"EndedStillRegistered", jit, runnerLook{claim: claim(ended, time.Minute), runner: online, registered: true}, verdict{state: runnerNone, gone: true}},
		{"Busy", jit, runnerLook{claim: claim(running, 25*time.Hour), runner: busy, registered: true}, verdict{state: runnerBusy, online: true}},
		{"Idle", jit, runnerLook{claim: claim(running, time.Minute), runner: online, registered: true}, verdict{state: runnerIdle, online: true}},
		{"IdlePastMaxLifetime", jit, runnerLook{claim: claim(running, 25*time.Hour), runner: online, registered: true}, verdict{state: runnerNone, online: true, gone: true}},
		{"IdleWithStaleLabels", jit, runnerLook{claim: claim(running, time.Minute), runner: stale, registered: true}, verdict{state: runnerNone, online: true, gone: true}},
		{"DeregisteredAfterBeingOnline", token, runnerLook{claim: claim(running, time.Minute), seenOnline: true}, verdict{state: runnerNone, gone: true, finished: true}},
		{"JobRecordedCompleted", token, runnerLook{claim: claim(running, time.Minute), jobCompleted: true}, verdict{state: runnerNone, gone: true, finished: true}},
		{"RegistrationTimeout", token, runnerLook{claim: claim(running, 16*time.Minute)}, verdict{state: runnerNone, gone: true, timedOut: true}},
		{"JITGoneBetweenLooks", jit, runnerLook{claim: claim(running, time.Minute), listedAt: now}, verdict{state: runnerNone, finished: true}},
		{"JITListingOlderThanTheClaim", jit, runnerLook{claim: claim(running, time.Minute), listedAt: now.Add(-2 * time.Minute)}, verdict{state: runnerPending}},
		{"TokenNotRegisteredYet", token, runnerLook{claim: claim(running, time.Minute), listedAt: now}, verdict{state: runnerPending}},
		{"RegisteredOffline", jit, runnerLook{claim: claim(running, time.Minute), runner: github.Runner{Name: "p-a", Status: github.RunnerOffline}, registered: true, listedAt: now}, verdict{state: runnerPending}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.look.now = now
			if got := judge(c.pool, c.look); got != c.want {
				t.Fatalf("judge = %+v, want %+v", got, c.want)
			}
		})
	}
}
