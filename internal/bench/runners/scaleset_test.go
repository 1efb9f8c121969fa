package runners

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/bench/percentile"
	"github.com/hyperfleet/hyperfleet/internal/bench/runnerlab"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// BenchmarkScaleSetVsWebhook queues the same burst on a scale-set pool and
// on a webhook pool, one after the other in one run, and prints for each
// the time from a job being queued in githubsim to a runner's provider
// Create call and to a runner taking the job (p50/p99), and the GitHub
// requests (REST and the scale-set service) per job served:
//
//	go test -run '^$' -bench ScaleSetVsWebhook -benchtime 1x -timeout 60m -v ./internal/bench/runners/
//
// RUNNERS_N sets the larger burst (500); the smaller is 100. Each pool's
// maxReplicas fits its burst. The k-th job queued is paired with the k-th
// Create call (a pool makes runners for a count, not for a job).
func BenchmarkScaleSetVsWebhook(b *testing.B) {
	for _, n := range []int{100, burstSize(b)} {
		for _, mode := range []string{"scale-set", "webhook"} {
			b.Run(fmt.Sprintf("jobs=%d/%s", n, mode), func(b *testing.B) {
				for range b.N {
					modeBurst(b, n, mode == "scale-set")
				}
			})
		}
	}
}

func modeBurst(b *testing.B, n int, scaleSet bool) {
	b.StopTimer()
	ctx := context.Background()
	c := testenv.Client()
	ns := testenv.Namespace(b)
	name := fmt.Sprintf("wh%d", n)
	if scaleSet {
		name = fmt.Sprintf("ss%d", n)
	}
	if err := lab.Prepare(ctx, c, ns, runnerlab.Pool{Name: name, MaxReplicas: int32(n), ScaleSet: scaleSet}); err != nil {
		b.Fatal(err)
	}
	eventually.That(b, 2*time.Minute, func() (bool, string) {
		p := &hypervisorv1alpha1.RunnerPool{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return false, err.Error()
		}
		ready := readyReason(p) == "Ready"
		if scaleSet {
			ready = ready && p.Status.ScaleSet != nil && p.Status.ScaleSet.Session == hypervisorv1alpha1.ScaleSetSessionOpen
		}
		return ready, fmt.Sprintf("%+v", p.Status)
	})
	labels := []string{"self-hosted", name}
	if scaleSet {
		labels = []string{name}
	}
	before := gh.Stats()
	b.StartTimer()
	ids := map[int64]bool{}
	for range n {
		id, err := gh.QueueJobSpec(githubsim.JobSpec{Repo: repo, Labels: labels, Duration: jobDuration})
		if err != nil {
			b.Fatal(err)
		}
		ids[id] = true
	}
	var queued, started []time.Time
	var startedBy map[int64]time.Duration
	eventually.That(b, 30*time.Minute, func() (bool, string) {
		queued, started, startedBy = nil, nil, map[int64]time.Duration{}
		done := 0
		for _, j := range gh.Jobs() {
			if !ids[j.ID] {
				continue
			}
			queued = append(queued, j.CreatedAt)
			if !j.StartedAt.IsZero() {
				started = append(started, j.StartedAt)
				startedBy[j.ID] = j.StartedAt.Sub(j.CreatedAt)
			}
			if j.Status == githubsim.JobCompleted {
				done++
			}
		}
		return done == n, fmt.Sprintf("%d of %d jobs served", done, n)
	})
	b.StopTimer()
	rest, service := requestsSince(before, gh.Stats())
	slices.SortFunc(queued, func(a, b time.Time) int { return a.Compare(b) })
	made := paired(queued, slices.Collect(maps.Values(creates.in(ns))))
	taken := slices.Collect(maps.Values(startedBy))
	mode := "webhook pool"
	if scaleSet {
		mode = "scale-set pool"
	}
	fmt.Printf("\n%s, %d jobs queued at once (maxReplicas %d)\n", mode, n, n)
	fmt.Printf("%-30s %6s %10s %10s %10s\n", "", "n", "p50", "p99", "max")
	fmt.Printf("%-30s %6d %10s %10s %10s\n", "queued → provider Create call", len(made), pct(made, 50), pct(made, 99), pct(made, 100))
	fmt.Printf("%-30s %6d %10s %10s %10s\n", "queued → job taken", len(taken), pct(taken, 50), pct(taken, 99), pct(taken, 100))
	fmt.Printf("GitHub requests while serving the burst: REST %d (%.2f per job), scale-set service %d (%.2f per job)\n",
		rest, float64(rest)/float64(n), service, float64(service)/float64(n))
	b.ReportMetric(percentile.Millis(percentile.Of(made, 50)), "create-p50-ms")
	b.ReportMetric(percentile.Millis(percentile.Of(made, 99)), "create-p99-ms")
	b.ReportMetric(percentile.Millis(percentile.Of(taken, 50)), "taken-p50-ms")
	b.ReportMetric(percentile.Millis(percentile.Of(taken, 99)), "taken-p99-ms")
	b.ReportMetric(float64(rest)/float64(n), "rest-req/job")
	b.ReportMetric(float64(service)/float64(n), "scaleset-req/job")
	b.ReportMetric(0, "ns/op")
	// The pool goes with its burst, so the next one's requests are its own.
	p := &hypervisorv1alpha1.RunnerPool{}
	p.Namespace, p.Name = ns, name
	if err := c.Delete(ctx, p); err != nil {
		b.Fatal(err)
	}
	eventually.That(b, 5*time.Minute, func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(p), &hypervisorv1alpha1.RunnerPool{})
		return err != nil, "the burst's pool is still being deleted"
	})
}

// requestsSince splits the requests made between two Stats into the REST
// API's (GitHub's rate limit counts them) and the scale-set service's
// (the Actions service, with its own token: the session, its messages, job
// acquisition, JIT configs, and the registration-token exchange).
func requestsSince(before, after map[string]int) (rest, service int) {
	for endpoint, n := range after {
		d := n - before[endpoint]
		if strings.Contains(endpoint, "/_apis/") || endpoint == githubsim.EndpointRunnerRegistration {
			service += d
		} else {
			rest += d
		}
	}
	return rest, service
}
func readyReason(p *hypervisorv1alpha1.RunnerPool) string {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Reason
		}
	}
	return ""
}
