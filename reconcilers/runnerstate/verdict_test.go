package runnerstate

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
	seen := func(c *hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.MachineClaim {
		c.Annotations = map[string]string{SeenOnlineAnnotation: FormatTime(now.Add(-time.Minute))}
		return c
	}
	endedAt := func(c *hypervisorv1alpha1.MachineClaim, at time.Time) *hypervisorv1alpha1.MachineClaim {
		c.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, LastTransitionTime: metav1.NewTime(at)}}
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
		look Look
		want Verdict
	}{
		{"EndedUnregisteredJIT", jit, Look{Claim: claim(ended, time.Minute)}, Verdict{State: None, Gone: true, Finished: true}},
		{"EndedUnregisteredTokenNeverOnline", token, Look{Claim: claim(ended, time.Minute)}, Verdict{State: None, Gone: true}},
		{"EndedUnregisteredTokenSeenOnline", token, Look{Claim: seen(claim(ended, time.Minute))}, Verdict{State: None, Gone: true, Finished: true}},
		{"EndedRegisteredInAListingFromBeforeTheEnd", jit, Look{Claim: endedAt(claim(ended, time.Minute), now), Runner: online, Registered: true, ListedAt: now.Add(-time.Second)}, Verdict{State: None}},
		{"EndedStillRegisteredInAListingAfterTheEnd", jit, Look{Claim: endedAt(claim(ended, time.Minute), now.Add(-5*time.Second)), Runner: online, Registered: true, ListedAt: now}, Verdict{State: None, Gone: true}},
		{"EndedStillRegistered", jit, Look{Claim: claim(ended, time.Minute), Runner: online, Registered: true}, Verdict{State: None, Gone: true}},
		{"Busy", jit, Look{Claim: claim(running, 25*time.Hour), Runner: busy, Registered: true}, Verdict{State: Busy, Online: true}},
		{"Idle", jit, Look{Claim: claim(running, time.Minute), Runner: online, Registered: true}, Verdict{State: Idle, Online: true}},
		{"IdlePastMaxLifetime", jit, Look{Claim: claim(running, 25*time.Hour), Runner: online, Registered: true}, Verdict{State: None, Online: true, Gone: true}},
		{"IdleWithStaleLabels", jit, Look{Claim: claim(running, time.Minute), Runner: stale, Registered: true}, Verdict{State: None, Online: true, Gone: true}},
		{"DeregisteredAfterBeingOnline", token, Look{Claim: seen(claim(running, time.Minute))}, Verdict{State: None, Gone: true, Finished: true}},
		{"JobRecordedCompleted", token, Look{Claim: claim(running, time.Minute), JobCompleted: true}, Verdict{State: None, Gone: true, Finished: true}},
		{"RegistrationTimeout", token, Look{Claim: claim(running, 16*time.Minute)}, Verdict{State: None, Gone: true, TimedOut: true}},
		{"JITGoneBetweenLooks", jit, Look{Claim: claim(running, time.Minute), ListedAt: now}, Verdict{State: None, Finished: true}},
		{"JITListingOlderThanTheClaim", jit, Look{Claim: claim(running, time.Minute), ListedAt: now.Add(-2 * time.Minute)}, Verdict{State: Pending}},
		{"TokenNotRegisteredYet", token, Look{Claim: claim(running, time.Minute), ListedAt: now}, Verdict{State: Pending}},
		{"RegisteredOffline", jit, Look{Claim: claim(running, time.Minute), Runner: github.Runner{Name: "p-a", Status: github.RunnerOffline}, Registered: true, ListedAt: now}, Verdict{State: Pending}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.look.Now = now
			if got := Judge(c.pool, c.look); got != c.want {
				t.Fatalf("Judge = %+v, want %+v", got, c.want)
			}
		})
	}
}
