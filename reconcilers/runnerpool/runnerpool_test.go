package runnerpool_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

func jobDone(id int64) (bool, string) {
	j, ok := gh.Job(id)
	return ok && j.Status == "completed", fmt.Sprintf("job %d: %+v", id, j)
}

// idleTTLPasses lets the idle runners above what pool wants outlive its
// idle TTL: the test steps the pools' clock instead of waiting.
func idleTTLPasses(p *hypervisorv1alpha1.RunnerPool) {
	if p.Status.IdleReplicas > 0 && p.Status.Replicas > p.Status.DesiredReplicas {
		clk.Step(p.Spec.IdleTTL.Duration)
	}
}

// A queued job gets a runner that takes it; after the job the runner and
// its VM are gone.
func TestQueuedJobGetsARunnerAndTheVMIsGone(t *testing.T) {
	l := newLab(t)
	l.pool("single")
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("single")
		return readyReason(p) == "Ready", describe(p)
	})
	id, err := gh.QueueJob(repo, []string{"self-hosted", "linux", "x64", "single"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) { return jobDone(id) })
	j, _ := gh.Job(id)
	if !strings.HasPrefix(j.RunnerName, "single-") || j.Conclusion != "success" {
		t.Errorf("job ran on %q with conclusion %q", j.RunnerName, j.Conclusion)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		p := l.get("single")
		return len(l.claims()) == 0 && l.vms() == 0 && registered("single") == 0 && p.Status.Replicas == 0,
			fmt.Sprintf("%d claims, %d VMs, %d registered; %s", len(l.claims()), l.vms(), registered("single"), describe(p))
	})
}

// 200 queued jobs scale the pool to max and back to min, with no runner
// left registered and no VM left behind.
func TestBurstScalesToMaxAndBack(t *testing.T) {
	l := newLab(t)
	l.pool("burst", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.MinReplicas, p.Spec.MaxReplicas = 1, 12 })
	ids := make([]int64, 0, 200)
	for range 200 {
		id, err := gh.QueueJobSpec(githubsim.JobSpec{Repo: repo, Labels: []string{"self-hosted", "burst"}, Duration: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	peak := int32(0)
	eventually.That(t, 5*time.Minute, func() (bool, string) {
		p := l.get("burst")
		peak = max(peak, p.Status.Replicas)
		if p.Status.Replicas > p.Spec.MaxReplicas {
			t.Fatalf("%d runners, above maxReplicas %d", p.Status.Replicas, p.Spec.MaxReplicas)
		}
		done := 0
		for _, id := range ids {
			if ok, _ := jobDone(id); ok {
				done++
			}
		}
		return done == len(ids), fmt.Sprintf("%d of %d jobs done; peak %d; %s", done, len(ids), peak, describe(p))
	})
	if peak != 12 {
		t.Errorf("the pool peaked at %d runners; 200 queued jobs should take it to maxReplicas 12", peak)
	}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		p := l.get("burst")
		idleTTLPasses(p)
		return p.Status.Replicas == 1 && len(l.claims()) == 1 && l.vms() == 1 && registered("burst") <= 1,
			fmt.Sprintf("%d claims, %d VMs, %d registered; %s", len(l.claims()), l.vms(), registered("burst"), describe(p))
	})
	// Deleting the pool takes the last runner with it.
	if err := l.c.Delete(rootCtx, l.get("burst")); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		var left []string
		for _, c := range l.claims() {
			msg := ""
			for _, cond := range c.Status.Conditions {
				msg += cond.Type + "=" + string(cond.Status) + " " + cond.Message + "; "
			}
			left = append(left, fmt.Sprintf("%s(%s, deleting %v: %s)", c.Name, c.Status.Phase, c.DeletionTimestamp != nil, msg))
		}
		return len(l.claims()) == 0 && l.vms() == 0 && registered("burst") == 0,
			fmt.Sprintf("claims %v, %d VMs, %d registered after the pool's deletion", left, l.vms(), registered("burst"))
	})
}

// A redelivery of the same queued delivery never scales twice, and a
// forged delivery is refused.
func TestRedeliveredAndForgedDeliveries(t *testing.T) {
	l := newLab(t)
	kv.HangAllScheduling(true) // runners never come up: the demand stays visible
	defer kv.HangAllScheduling(false)
	l.pool("redeliver")
	// A pool takes a scope's deliveries once its credentials were seen to
	// reach it; one delivered before then is left to the poll.
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("redeliver")
		return p.Status.ReachedScope != "", describe(p)
	})
	id, err := gh.QueueJob(repo, []string{"self-hosted", "redeliver"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("redeliver")
		return p.Status.DesiredReplicas == 1 && len(l.claims()) == 1, describe(p)
	})
	var delivery int64
	for _, d := range gh.Deliveries() {
		if d.JobID == id && d.Action == "queued" {
			delivery = d.ID
		}
	}
	if delivery == 0 {
		t.Fatalf("no queued delivery for job %d in %+v", id, gh.Deliveries())
	}
	for range 3 {
		if _, err := gh.Redeliver(delivery); err != nil {
			t.Fatal(err)
		}
	}
	// A forged delivery for another job: refused before it can scale.
	body := []byte(`{"action":"queued","workflow_job":{"id":987654321,"labels":["self-hosted","redeliver"]},"repository":{"name":"widgets","owner":{"login":"acme"}}}`)
	req, _ := http.NewRequest(http.MethodPost, webhookURL, bytes.NewReader(body))
	req.Header.Set("X-GitHub-Event", "workflow_job")
	req.Header.Set("X-GitHub-Delivery", "forged-1")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hub-Signature-256", githubsim.Sign("not-the-secret", body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged delivery answered %d, want 401", res.StatusCode)
	}
	// Wait for the redeliveries to have been answered, then check the count.
	eventually.That(t, 10*time.Second, func() (bool, string) {
		n := 0
		for _, d := range gh.Deliveries() {
			if d.JobID == id && d.Action == "queued" && d.StatusCode/100 == 2 {
				n++
			}
		}
		return n >= 4, fmt.Sprintf("%d queued deliveries answered", n)
	})
	p := l.get("redeliver")
	if p.Status.DesiredReplicas != 1 || len(l.claims()) != 1 || p.Status.QueuedJobs != 1 {
		t.Errorf("after 3 redeliveries and a forgery: %d claims; %s", len(l.claims()), describe(p))
	}
}

// Scale-down never kills a busy runner: kubectl scale to 0 while a long
// job runs leaves the runner until its job is done.
func TestBusyRunnerNeverKilledByScaleDown(t *testing.T) {
	l := newLab(t)
	one := int32(1)
	l.pool("busy", func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.Replicas = &one
		p.Spec.IdleTTL = &metav1.Duration{Duration: 0}
	})
	id, err := gh.QueueJobSpec(githubsim.JobSpec{Repo: repo, Labels: []string{"self-hosted", "busy"}, Duration: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		j, _ := gh.Job(id)
		return j.Status == "in_progress", fmt.Sprintf("job %+v", j)
	})
	// kubectl scale --replicas=0, through the scale subresource.
	if err := l.c.SubResource("scale").Update(rootCtx, l.get("busy"), client.WithSubResourceBody(&autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: l.ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 0},
	})); err != nil {
		t.Fatal(err)
	}
	if p := l.get("busy"); p.Spec.Replicas == nil || *p.Spec.Replicas != 0 {
		t.Fatalf("the scale subresource did not set spec.replicas: %v", p.Spec.Replicas)
	}
	eventually.That(t, time.Minute, func() (bool, string) { return jobDone(id) })
	if j, _ := gh.Job(id); j.Conclusion != "success" {
		t.Fatalf("the busy runner's job ended %q: it was killed", j.Conclusion)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		return len(l.claims()) == 0 && registered("busy") == 0, describe(l.get("busy"))
	})
}

// GitHub's Retry-After is honoured: the pool waits, says why, and goes on.
func TestRetryAfterIsHonoured(t *testing.T) {
	l := newLab(t)
	l.pool("throttled")
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("throttled")
		return readyReason(p) == "Ready", describe(p)
	})
	if err := gh.InjectFault(githubsim.Fault{Endpoint: githubsim.EndpointRepoListRunners, Action: githubsim.FaultHTTPError,
		Status: http.StatusTooManyRequests, RetryAfter: 4 * time.Second, Times: 1}); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("throttled")
		return readyReason(p) == "RateLimited", describe(p)
	})
	throttledAt, calls := time.Now(), gh.Calls(githubsim.EndpointRepoListRunners)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("throttled")
		return readyReason(p) == "Ready", describe(p)
	})
	// Every pool shares the budget, so no list went out for ~4 s; the
	// first after it is the one that recovered.
	if waited := time.Since(throttledAt); waited < 2*time.Second {
		t.Errorf("recovered after %s; Retry-After said 4s", waited)
	}
	if n := gh.Calls(githubsim.EndpointRepoListRunners) - calls; n == 0 {
		t.Error("no list call after the Retry-After passed")
	}
}

// A delivery GitHub never made is made up for by the poll of queued jobs.
func TestPollingFallbackForLostDeliveries(t *testing.T) {
	l := newLab(t)
	l.pool("polled", func(p *hypervisorv1alpha1.RunnerPool) {
		// 10s is the shortest poll the CRD allows; the test steps the fake
		// clock by it, so the value costs no real time.
		p.Spec.WebhookScaling = &hypervisorv1alpha1.WebhookScaling{PollInterval: &metav1.Duration{Duration: 10 * time.Second}}
	})
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("polled")
		return readyReason(p) == "Ready", describe(p)
	})
	gh.DropNextDeliveries(1)
	id, err := gh.QueueJob(repo, []string{"self-hosted", "polled"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		// Until the pool has seen the job, its next poll comes due.
		if p := l.get("polled"); p.Status.QueuedJobs == 0 && p.Status.Replicas == 0 {
			clk.Step(p.Spec.WebhookScaling.PollInterval.Duration)
		}
		return jobDone(id)
	})
	eventually.That(t, time.Minute, func() (bool, string) {
		// A poll stepped in just before the runner took the job may have
		// made a second runner; it goes once idle past the idle TTL.
		p := l.get("polled")
		idleTTLPasses(p)
		return len(l.claims()) == 0 && registered("polled") == 0, describe(p)
	})
}

// A rotated GitHub App key: the pool reports the refusal, and the new key
// in the Secret is used without a restart.
func TestAppKeyRotation(t *testing.T) {
	l := newLab(t)
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "github-app", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"appID": fmt.Sprint(gh.AppID()), "installationID": fmt.Sprint(gh.InstallationID()), "privateKey": string(gh.AppPrivateKeyPEM())},
	})
	l.pool("app", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.GitHub.CredentialsRef.Name = "github-app" })
	eventually.That(t, 30*time.Second, func() (bool, string) {
		p := l.get("app")
		return readyReason(p) == "Ready", describe(p)
	})
	newKey, err := gh.RotateAppKey()
	if err != nil {
		t.Fatal(err)
	}
	gh.RevokeInstallationTokens()
	defer func() {
		// Other tests' pools use a PAT; the App key stays rotated.
		_ = newKey
	}()
	eventually.That(t, time.Minute, func() (bool, string) {
		p := l.get("app")
		return readyReason(p) == "AuthenticationFailed", describe(p)
	})
	if strings.Contains(describe(l.get("app")), "PRIVATE KEY") {
		t.Fatal("a condition leaks the key")
	}
	s := &corev1.Secret{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "github-app"}, s); err != nil {
		t.Fatal(err)
	}
	s.Data["privateKey"] = newKey
	if err := l.c.Update(rootCtx, s); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		p := l.get("app")
		return readyReason(p) == "Ready", describe(p)
	})
	id, err := gh.QueueJob(repo, []string{"self-hosted", "app"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) { return jobDone(id) })
}

// A runner that never comes online is replaced once its registration
// timeout passes; the test moves the pools' clock past the timeout instead
// of waiting it out.
func TestRegistrationTimeoutReplacesTheRunner(t *testing.T) {
	l := newLab(t)
	kv.HangAllScheduling(true) // the runner's VM never starts
	defer kv.HangAllScheduling(false)
	one := int32(1)
	pool := l.pool("stuck", func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.Replicas = &one
		p.Spec.RegistrationTimeout = &metav1.Duration{Duration: 10 * time.Minute}
	})
	defer func() { _ = l.c.Delete(rootCtx, pool) }()
	first := l.onlyClaim("stuck")
	ageClaim(&first, 10*time.Minute+time.Second)
	l.replaced("stuck", first.Name, "RegistrationTimeout")
}

// An idle runner past its pool's maxLifetime is retired and replaced; the
// test moves the pools' clock past the lifetime instead of waiting it out.
func TestIdleRunnerPastMaxLifetimeIsReplaced(t *testing.T) {
	l := newLab(t)
	one := int32(1)
	pool := l.pool("aged", func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.Replicas = &one
		p.Spec.MaxLifetime = &metav1.Duration{Duration: time.Hour}
	})
	defer func() { _ = l.c.Delete(rootCtx, pool) }()
	first := l.onlyClaim("aged")
	eventually.That(t, time.Minute, func() (bool, string) {
		p := l.get("aged")
		return p.Status.IdleReplicas == 1 && readyReason(p) == "Ready", describe(p)
	})
	ageClaim(&first, time.Hour+time.Second)
	l.replaced("aged", first.Name, "")
	if n := registered("aged"); n > 1 {
		t.Errorf("%d runners registered; the retired one's registration should be gone", n)
	}
}

// onlyClaim waits for the pool's one claim and returns it.
func (l *lab) onlyClaim(pool string) hypervisorv1alpha1.MachineClaim {
	l.t.Helper()
	var claim hypervisorv1alpha1.MachineClaim
	eventually.That(l.t, 30*time.Second, func() (bool, string) {
		cs := l.claims()
		if len(cs) == 1 {
			claim = cs[0]
		}
		return len(cs) == 1, fmt.Sprintf("%d claims; %s", len(cs), describe(l.get(pool)))
	})
	return claim
}

// replaced waits until the claim first is deleted and another one made in
// its place, and, if reason is set, for the pool's event saying why.
func (l *lab) replaced(pool, first, reason string) {
	l.t.Helper()
	eventually.That(l.t, time.Minute, func() (bool, string) {
		firstGone, replacement := true, false
		var names []string
		for _, c := range l.claims() {
			names = append(names, fmt.Sprintf("%s(deleting %v)", c.Name, c.DeletionTimestamp != nil))
			if c.Name == first && c.DeletionTimestamp == nil {
				firstGone = false
			}
			if c.Name != first && c.DeletionTimestamp == nil {
				replacement = true
			}
		}
		evs := l.events(pool)
		said := reason == ""
		for _, e := range evs {
			said = said || strings.HasPrefix(e, reason+": ")
		}
		return firstGone && replacement && said, fmt.Sprintf("claims %v; events %q; %s", names, evs, describe(l.get(pool)))
	})
}
