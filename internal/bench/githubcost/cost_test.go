package githubcost

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/bench/runnerlab"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
)

// BenchmarkGitHubCost serves GHCOST_JOBS jobs (500) spread over GHCOST_POOLS
// pools (10) on one personal access token, each pool at most 10 runners,
// then leaves the pools idle for GHCOST_IDLE (2m) and prints what GitHub
// was asked: requests per job served, and per idle pool-hour (scaled from
// the idle window). githubsim counts every request it receives, refused
// ones included.
func BenchmarkGitHubCost(b *testing.B) {
	pools := envInt(b, "GHCOST_POOLS", 10)
	jobs := envInt(b, "GHCOST_JOBS", 500)
	idle := envDuration(b, "GHCOST_IDLE", 2*time.Minute)
	for range b.N {
		ns := testenv.Namespace(b)
		names := setup(b, ns, pools)
		gh.ResetStats()
		start := time.Now()
		var ids []int64
		for i := range jobs {
			id, err := gh.QueueJob(repo, []string{"self-hosted", names[i%pools]})
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
		eventually.That(b, 30*time.Minute, func() (bool, string) {
			done := 0
			for _, id := range ids {
				if j, ok := gh.Job(id); ok && j.Status == githubsim.JobCompleted {
					done++
				}
			}
			return done == len(ids), fmt.Sprintf("%d of %d jobs completed", done, len(ids))
		})
		served := time.Since(start)
		busy := gh.Stats()
		// Idle: every runner retired (minReplicas 0, idle TTL 30 s) before
		// the idle window starts, so it counts only what a pool with nothing
		// to do costs.
		eventually.That(b, 10*time.Minute, func() (bool, string) {
			n := len(claims(b, ns))
			return n == 0, fmt.Sprintf("%d runner claims left", n)
		})
		gh.ResetStats()
		time.Sleep(idle) // the measured window, not an assertion
		quiet := gh.Stats()

		b.StopTimer()
		report(b, pools, jobs, served, busy, idle, quiet)
	}
}

func report(b *testing.B, pools, jobs int, served time.Duration, busy map[string]int, idle time.Duration, quiet map[string]int) {
	perJob := float64(sum(busy)) / float64(jobs)
	poolHours := float64(pools) * idle.Hours()
	perPoolHour := float64(sum(quiet)) / poolHours
	var out strings.Builder
	fmt.Fprintf(&out, "\nGitHub API cost: %d pools on one credential, %d jobs (served in %s)\n", pools, jobs, served.Round(time.Second))
	fmt.Fprintf(&out, "  requests while serving: %d = %.2f per job served\n", sum(busy), perJob)
	writeEndpoints(&out, busy)
	fmt.Fprintf(&out, "  idle: %d requests in %s with %d idle pools = %.0f per idle pool-hour (scaled from the %s window)\n",
		sum(quiet), idle, pools, perPoolHour, idle)
	writeEndpoints(&out, quiet)
	b.Log(out.String())
	b.ReportMetric(perJob, "requests/job")
	b.ReportMetric(perPoolHour, "requests/idle-pool-hour")
}

func writeEndpoints(out *strings.Builder, stats map[string]int) {
	keys := make([]string, 0, len(stats))
	for k := range stats {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return stats[b] - stats[a] })
	for _, k := range keys {
		fmt.Fprintf(out, "    %6d  %s\n", stats[k], k)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// setup makes the namespace's PAT Secret, KubeVirt cluster, runner template
// and n pools, pool i serving jobs labelled "pool-i".
func setup(b *testing.B, ns string, n int) []string {
	b.Helper()
	var names []string
	var pools []runnerlab.Pool
	for i := range n {
		name := "pool-" + strconv.Itoa(i)
		names = append(names, name)
		pools = append(pools, runnerlab.Pool{Name: name, MaxReplicas: 10, IdleTTL: 30 * time.Second})
	}
	if err := lab.Prepare(b.Context(), testenv.Client(), ns, pools...); err != nil {
		b.Fatal(err)
	}
	return names
}

func claims(b *testing.B, ns string) []hypervisorv1alpha1.MachineClaim {
	var list hypervisorv1alpha1.MachineClaimList
	if err := testenv.Client().List(b.Context(), &list, client.InNamespace(ns), client.HasLabels{runnerpool.PoolLabel}); err != nil {
		b.Fatal(err)
	}
	return list.Items
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
