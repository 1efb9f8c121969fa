package performers

import (
	"os"
	"os/exec"
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
func startOperator(b *testing.B, bin string) *operator {
	b.Helper()
	args := []string{"run", "--leader-elect=false",
		// Plain HTTP on loopback: the benchmark reads the worker count the
		// reconciler really runs with from controller-runtime's gauge.
		"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=0", "--webhook-bind-address=0", "--log-level=error",
		"--controllers=hourglass"}
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

// alive fails the benchmark, with the operator's log, if it has exited.
func (o *operator) alive(b *testing.B) {
	b.Helper()
	if err := o.Exited(); err != nil {
		b.Fatal(err)
	}
}
