package runnerpool

import (
	"errors"
	"fmt"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions/conditionstest"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

func claimsOf(n int) []*hypervisorv1alpha1.MachineClaim {
	out := make([]*hypervisorv1alpha1.MachineClaim, n)
	for i := range out {
		out[i] = &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i)}}
	}
	return out
}

// TestComputeStatus covers every state a pool can be in: what computeStatus
// returns, the conditions it leads to, and that none breaks kstatus or
// carries a timestamp.
func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	deleted := metav1.NewTime(now.Add(-time.Minute))
	permanent := &providers.PermanentError{Reason: "AuthenticationFailed", Message: "GitHub refused the token in Secret github-pat (key token); replace it", Err: errors.New("401")}
	throttled := &providers.TransientError{Reason: "RateLimited", After: 4 * time.Second, Err: errors.New("GitHub rate limit: retry-after; not sending for 4s")}
	type want struct {
		state                    conditions.State
		reason, message          string
		ready, reconciling, stal bool
		// unchanged: the conditions stay as they were (Ready, from before).
		unchanged bool
		// counts: the status counts were written (desired, replicas, queued).
		desired, replicas, queued int32
		scaleTime                 bool
	}
	cases := []struct {
		name string
		// prior is the desired count the status held before.
		prior int32
		s     scope
		err   error
		want  want
	}{
		{
			name: "template missing: stalled until it is created",
			s:    scope{templateMissing: true},
			want: want{state: conditions.Stalled, reason: meta.DependencyNotFoundReason, message: "HypervisorMachineTemplate runner (spec.templateRef) not found; create it", stal: true},
		},
		{
			name: "GitHub refused the credentials: stalled with GitHub's reason",
			s:    scope{githubErr: permanent},
			want: want{state: conditions.Stalled, reason: "AuthenticationFailed", message: permanent.Message, stal: true},
		},
		{
			name: "the credentials Secret does not parse: stalled",
			s:    scope{githubErr: &runnerstate.CredentialsError{Secret: "github-pat", Err: errors.New("no token, and no appID/installationID/privateKey")}},
			want: want{state: conditions.Stalled, reason: "CredentialsInvalid",
				message: "Secret github-pat (spec.github.credentialsRef): no token, and no appID/installationID/privateKey", stal: true},
		},
		{
			name: "rate limited: waiting, with the limiter's reason",
			s:    scope{githubErr: throttled},
			want: want{state: conditions.Waiting, reason: "RateLimited", message: throttled.Error()},
		},
		{
			name: "GitHub unreachable: waiting",
			s:    scope{githubErr: errors.New("dial tcp: connection refused")},
			want: want{state: conditions.Waiting, reason: "GitHubError", message: "dial tcp: connection refused"},
		},
		{
			name: "an API error the next reconcile retries: nothing new said",
			s:    scope{},
			err:  errors.New("listing MachineClaims: the server is currently unable to handle the request"),
			want: want{unchanged: true, ready: true},
		},
		{
			name:  "a runner could not be made: waiting, counts still written",
			prior: 1,
			s: scope{obs: &observed{idle: claimsOf(1)}, scaled: &scaling{desired: 3, queued: 2},
				createErr: errors.New("creating the MachineClaim: quota exceeded")},
			want: want{state: conditions.Waiting, reason: "RunnerCreateFailed", message: "creating a runner: creating the MachineClaim: quota exceeded",
				desired: 3, replicas: 1, queued: 2, scaleTime: true},
		},
		{
			name:  "a runner's registration was throttled: waiting with the reason",
			prior: 1,
			s:     scope{obs: &observed{}, scaled: &scaling{desired: 1, queued: 1}, createErr: throttled},
			want: want{state: conditions.Waiting, reason: "RateLimited", message: "creating a runner: " + throttled.Error(),
				desired: 1, queued: 1},
		},
		{
			name:  "registrations left to remove: deregistering",
			prior: 2,
			s:     scope{obs: &observed{idle: claimsOf(2)}, scaled: &scaling{desired: 2}, pendingDereg: 1},
			want: want{state: conditions.Progressing, reason: "Deregistering", reconciling: true,
				message: "2 runners (2 idle, 0 busy, 0 starting), 0 jobs queued; 1 runner registrations could not be removed yet and are retried",
				desired: 2, replicas: 2},
		},
		{
			name:  "fewer runners than wanted: scaling",
			prior: 0,
			s:     scope{obs: &observed{busy: claimsOf(1)}, scaled: &scaling{desired: 4, queued: 3}},
			want: want{state: conditions.Progressing, reason: "Scaling", reconciling: true,
				message: "scaling to 4: 1 runners (0 idle, 1 busy, 0 starting), 3 jobs queued", desired: 4, replicas: 1, queued: 3, scaleTime: true},
		},
		{
			name:  "runners still starting: scaling",
			prior: 2,
			s:     scope{obs: &observed{pending: claimsOf(1), idle: claimsOf(1)}, scaled: &scaling{desired: 2}},
			want: want{state: conditions.Progressing, reason: "Scaling", reconciling: true,
				message: "scaling to 2: 2 runners (1 idle, 0 busy, 1 starting), 0 jobs queued", desired: 2, replicas: 2},
		},
		{
			name:  "claims made but not yet in the cache count as runners",
			prior: 1,
			s:     scope{obs: &observed{unseen: 1}, scaled: &scaling{desired: 1}},
			want: want{state: conditions.Ready, reason: "Ready", ready: true,
				message: "1 runners (0 idle, 0 busy, 0 starting), 0 jobs queued", desired: 1, replicas: 1},
		},
		{
			name:  "as many runners as wanted, all up: ready",
			prior: 3,
			s:     scope{obs: &observed{idle: claimsOf(1), busy: claimsOf(2)}, scaled: &scaling{desired: 3}},
			want: want{state: conditions.Ready, reason: "Ready", ready: true,
				message: "3 runners (1 idle, 2 busy, 0 starting), 0 jobs queued", desired: 3, replicas: 3},
		},
		{
			name: "deleted: reconciling while the cleanup runs",
			s:    scope{pool: deletedPool(&deleted), cleanupLeft: 2},
			want: want{state: conditions.Progressing, reason: "Deleting", reconciling: true,
				message: "deleting the pool's machines and deregistering its runners"},
		},
		{
			name: "deleted, GitHub failing: the message says why it is retried",
			s:    scope{pool: deletedPool(&deleted), cleanupErr: errors.New("dial tcp: connection refused")},
			want: want{state: conditions.Progressing, reason: "Deleting", reconciling: true,
				message: "cleaning up, retrying: dial tcp: connection refused"},
		},
		{
			name: "deleted, listing its machines failed: still deleting",
			s:    scope{pool: deletedPool(&deleted)},
			err:  errors.New("listing MachineClaims: timeout"),
			want: want{state: conditions.Progressing, reason: "Deleting", reconciling: true,
				message: "deleting the pool's machines and deregistering its runners"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			if s.pool == nil {
				s.pool = livePool()
			}
			s.now = now
			pool := s.pool
			pool.Status.DesiredReplicas = tc.prior
			// The pool was Ready at generation 1; it is now at generation 2.
			conditions.Set(pool, 1, conditions.Summary{State: conditions.Ready, Reason: "Ready", Message: "0 runners"})
			pool.Status.ObservedGeneration = 1
			before := pool.DeepCopy()

			got := computeStatus(&s, tc.err)

			// As StatusPatch.Finalize applies it.
			if got.Reason != "" {
				conditions.Set(pool, pool.Generation, got)
			}
			if tc.err == nil {
				pool.Status.ObservedGeneration = pool.Generation
			}
			w := tc.want
			if w.unchanged {
				if got.Reason != "" {
					t.Fatalf("summary %+v; an error that is retried must leave the conditions alone", got)
				}
				if !apimeta.IsStatusConditionTrue(pool.Status.Conditions, meta.ReadyCondition) {
					t.Errorf("Ready changed: %+v", pool.Status.Conditions)
				}
			} else if got.State != w.state || got.Reason != w.reason || got.Message != w.message {
				t.Errorf("summary = %+v\nwant state %v, reason %q, message %q", got, w.state, w.reason, w.message)
			}
			for cond, want := range map[string]bool{meta.ReadyCondition: w.ready, meta.ReconcilingCondition: w.reconciling, meta.StalledCondition: w.stal} {
				if is := apimeta.IsStatusConditionTrue(pool.Status.Conditions, cond); is != want {
					t.Errorf("%s is %v, want %v", cond, is, want)
				}
			}
			conditionstest.NoViolations(t, pool, tc.err == nil)
			for _, c := range pool.Status.Conditions {
				conditionstest.NoTimestamp(t, c.Message)
			}
			st := pool.Status
			if s.scaled == nil {
				if st.DesiredReplicas != before.Status.DesiredReplicas || st.LastScaleTime != nil || st.Selector != "" {
					t.Errorf("counts written without a scale decision: %+v", st)
				}
				return
			}
			if st.DesiredReplicas != w.desired || st.Replicas != w.replicas || st.QueuedJobs != w.queued || st.Selector != PoolLabel+"=pool" {
				t.Errorf("counts: desired %d replicas %d queued %d selector %q; want %d %d %d",
					st.DesiredReplicas, st.Replicas, st.QueuedJobs, st.Selector, w.desired, w.replicas, w.queued)
			}
			if moved := st.LastScaleTime != nil; moved != w.scaleTime || (moved && !st.LastScaleTime.Time.Equal(now)) {
				t.Errorf("lastScaleTime %v; want moved %v (to the reconcile's time)", st.LastScaleTime, w.scaleTime)
			}
		})
	}
}

func livePool() *hypervisorv1alpha1.RunnerPool {
	return &hypervisorv1alpha1.RunnerPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "pool", Generation: 2},
		Spec:       hypervisorv1alpha1.RunnerPoolSpec{TemplateRef: meta.LocalObjectReference{Name: "runner"}},
	}
}

func deletedPool(at *metav1.Time) *hypervisorv1alpha1.RunnerPool {
	p := livePool()
	p.DeletionTimestamp = at
	p.Finalizers = []string{Finalizer}
	return p
}
