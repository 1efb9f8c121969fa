package performers

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/bench/proc"
)

// operator is the hyperfleet binary running as its own process, so the
// resident set and CPU time are the operator's alone.
type operator struct{ *proc.Process }

// startOperator runs `hyperfleet run` with its production defaults except
// what a benchmark process cannot have (ports, a Lease) and the
// reconcilers a Performer does not need. The kubeconfig goes through
// KUBECONFIG, as the fast column did; both paths now get the same
// client (cmd/hyperfleet's test).
func startOperator(b *testing.B, bin string, build operatorBuildKind) *operator {
	b.Helper()
	args := []string{"run", "--leader-elect=false",
		// Plain HTTP on loopback: the benchmark reads the worker count the
		// reconciler really runs with from controller-runtime's gauge.
		"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=0", "--log-level=error",
		"--controllers=hourglass"}
	if build.name == buildFull {
		// The Hourglass build has no webhook receiver, hence no flag.
		args = append(args, "--webhook-bind-address=0")
	}
	if pprofDir != "" {
		args = append(args, "--pprof-bind-address="+pprofAddr)
	}
	if n := envInt("PERF_WORKERS", 0); n > 0 {
		args = append(args, "--workers=performer="+strconv.Itoa(n))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	p, err := proc.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Stop)
	return &operator{p}
}

// pprofDir, from PERF_PPROF, is where saveHeap writes the operator's heap
// profiles; empty, none are taken and pprof is not served.
var (
	pprofDir  = os.Getenv("PERF_PPROF")
	pprofAddr = freeLoopback()
)

// saveHeap writes the operator's heap profile as <name>.pb.gz and, with the
// runtime's memory statistics at its end, as <name>.txt, into PERF_PPROF:
// where the heap goes at a moment of the run. A failure is logged, not
// fatal: the profile is an aid, the figures stand without it.
func saveHeap(b *testing.B, name string) {
	b.Helper()
	if pprofDir == "" {
		return
	}
	for file, query := range map[string]string{name + ".pb.gz": "", name + ".txt": "?debug=1"} {
		resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap" + query)
		if err != nil {
			b.Logf("heap profile %s: %v", file, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil {
			err = os.WriteFile(filepath.Join(pprofDir, file), body, 0o644)
		}
		if err != nil {
			b.Logf("heap profile %s: %v", file, err)
		}
	}
}

// alive fails the benchmark, with the operator's log, if it has exited.
func (o *operator) alive(b *testing.B) {
	b.Helper()
	if err := o.Exited(); err != nil {
		b.Fatal(err)
	}
}

// The operator builds the benchmark measures (PERF_BUILD): the Hourglass
// build (-tags hourglass, the default: what an installation running only
// Performers runs, as the original holds only Hourglass), or the full one.
const (
	buildHourglass = "hourglass"
	buildFull      = "full"
)

type operatorBuildKind struct {
	name string
	tags []string
}

func operatorBuild(b *testing.B) operatorBuildKind {
	b.Helper()
	switch v := os.Getenv("PERF_BUILD"); v {
	case "", buildHourglass:
		return operatorBuildKind{name: buildHourglass, tags: []string{"hourglass"}}
	case buildFull:
		return operatorBuildKind{name: buildFull}
	default:
		b.Fatalf("PERF_BUILD=%q: want %s or %s", v, buildHourglass, buildFull)
		return operatorBuildKind{}
	}
}

// rssAim is the peak RSS aim of a build: the original's at 1,000 for the
// Hourglass build, which holds what the original holds; the full build
// holds the machines, desktops and runners too (docs/performance.md).
func rssAim(build string) string {
	if build == buildHourglass {
		return "≤ 67.1 MiB at N=1000 (the original's; 47.8 at 200)"
	}
	return "≤ 80 MiB at N=1000 (the full build)"
}
