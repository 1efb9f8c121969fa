package chaos

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// report is every figure of one run.
type report struct {
	cfg  config
	logs string

	kills []kill

	faults, faultsUnused int
	faultKinds           []string
	faultCounts          map[string]int

	made, deleted    int
	perCluster       string
	workloadErrors   int
	lastWorkloadErr  string
	processes        int
	unexpectedExits  []string
	owners, polls    int
	twins            []twin
	left             leftovers
	leftCounted      bool
	chaosTime, total time.Duration
	standing         map[string]int
}

// print writes the report table to stdout (a benchmark's log is cut to ten
// lines without -v) and its headline figures as benchmark metrics.
func (r *report) print(b *testing.B) {
	var s strings.Builder
	w := tabwriter.NewWriter(&s, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { _, _ = fmt.Fprintf(w, "  %s\t%v\n", k, v) }
	_, _ = fmt.Fprintf(w, "\nHyperFleet chaos report (seed %d; CHAOS_SEED=%d to repeat the choices)\n", r.cfg.seed, r.cfg.seed)
	row("machine", fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU()))
	row("operator", fmt.Sprintf("2 × hyperfleet run, lease %s / renew %s / retry %s, orphan grace %s, sweep %s",
		r.cfg.leaseDuration, r.cfg.renewDeadline, r.cfg.retryPeriod, r.cfg.orphanGrace, r.cfg.sweepInterval))
	row("kill points", r.killSummary())
	row("failovers", len(r.kills))
	lead, work := r.failoverTimes()
	row("  kill → new Lease holder", lead)
	row("  kill → new leader reconciling", work)
	row("operator processes started", fmt.Sprintf("%d (%d exits not caused by the harness)", r.processes, len(r.unexpectedExits)))
	row("faults injected", fmt.Sprintf("%d (%d Proxmox faults armed but never hit)", r.faults, r.faultsUnused))
	for _, k := range r.faultKinds {
		row("  "+k, r.faultCounts[k])
	}
	row("claims made / deleted", fmt.Sprintf("%d / %d (%s)", r.made, r.deleted, r.perCluster))
	row("workload API errors", r.workloadErrors)
	row("claim UIDs seen on a machine", fmt.Sprintf("%d (%d snapshots of both hypervisors)", r.owners, r.polls))
	row("TWINS (must be 0)", len(r.twins))
	if r.leftCounted {
		row("ORPHAN VMs after the grace (must be 0)", fmt.Sprintf("%d Proxmox, %d KubeVirt (%d VMIs)", len(r.left.pveVMs), len(r.left.kvVMs), len(r.left.kvVMIs)))
		row("LEAKED user-data ISOs (must be 0)", len(r.left.isos))
		row("LEAKED cloud-init Secrets (must be 0)", len(r.left.kvSecrets))
	} else {
		row("orphans and leaks", "not counted: the run ended before the drain")
	}
	row("chaos phase / whole run", fmt.Sprintf("%s / %s", r.chaosTime.Round(time.Second), r.total.Round(time.Second)))
	row("operator logs", r.logs)
	_ = w.Flush()
	for _, k := range slices.Sorted(maps.Keys(r.standing)) {
		fmt.Fprintf(&s, "  claims standing when the kills stopped: %d × %s\n", r.standing[k], k)
	}
	for _, t := range r.twins {
		fmt.Fprintf(&s, "  twin: %s\n", t)
	}
	if r.leftCounted && r.left.total() > 0 {
		fmt.Fprintf(&s, "  left: %s\n", r.left)
	}
	for _, u := range r.unexpectedExits {
		fmt.Fprintf(&s, "  exit: %s\n", u)
	}
	if r.lastWorkloadErr != "" {
		fmt.Fprintf(&s, "  last workload error: %s\n", r.lastWorkloadErr)
	}
	_, _ = os.Stdout.WriteString(s.String())

	b.ReportMetric(float64(len(r.kills)), "kills")
	b.ReportMetric(float64(len(r.twins)), "twins")
	if r.leftCounted {
		b.ReportMetric(float64(len(r.left.pveVMs)+len(r.left.kvVMs)), "orphans")
		b.ReportMetric(float64(len(r.left.isos)+len(r.left.kvSecrets)), "leaks")
	}
	if len(r.kills) > 0 {
		b.ReportMetric(percentile(r.leaderTimes(), 50).Seconds(), "failover-p50-s")
	}
}

// killSummary counts the kill points by target, and how many landed while
// their step was under way.
func (r *report) killSummary() string {
	var parts []string
	on := 0
	for _, t := range targets {
		n, hit := 0, 0
		for _, k := range r.kills {
			if k.aim == t {
				n++
				if k.onTarget {
					hit++
				}
			}
		}
		on += hit
		parts = append(parts, fmt.Sprintf("%d during %s (%d on it)", n, t, hit))
	}
	return fmt.Sprintf("%d: %s; %d on target", len(r.kills), strings.Join(parts, ", "), on)
}

func (r *report) leaderTimes() []time.Duration {
	out := make([]time.Duration, 0, len(r.kills))
	for _, k := range r.kills {
		out = append(out, k.toLeader)
	}
	return out
}

func (r *report) failoverTimes() (lead, work string) {
	if len(r.kills) == 0 {
		return "-", "-"
	}
	w := make([]time.Duration, 0, len(r.kills))
	for _, k := range r.kills {
		w = append(w, k.toWorkers)
	}
	return spread(r.leaderTimes()), spread(w)
}

// spread renders min, p50, p95 and max.
func spread(d []time.Duration) string {
	return fmt.Sprintf("min %.1fs, p50 %.1fs, p95 %.1fs, max %.1fs",
		percentile(d, 0).Seconds(), percentile(d, 50).Seconds(), percentile(d, 95).Seconds(), percentile(d, 100).Seconds())
}

// percentile is the nearest-rank percentile of d (p in 0–100).
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s) + 99) / 100
	return s[max(i-1, 0)]
}
