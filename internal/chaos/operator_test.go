package chaos

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/testenv/replicas"
)

// leaseName is the operator's default --leader-election-id.
const leaseName = "hyperfleet-leader"

// controllers are the reconcilers MachineClaims need; the others would
// only add load to a shared 2-core machine.
const controllers = "hypervisorcluster,hypervisormachinetemplate,machineclaim,orphans"

// operators runs the two replicas through internal/testenv/replicas:
// whenever one ends, killed or not, the next incarnation of its slot
// starts, so there are always two.
type operators struct {
	*replicas.Set
	logDir string
	c      client.Client
}

func startOperators(b *testing.B, e *env, bin string, cfg config) *operators {
	b.Helper()
	logDir := filepath.Join(e.dir, "logs")
	args := operatorArgs(e.kubeconfig, cfg)
	set := replicas.Start(b, replicas.Spec{
		Prefix: "chaos", LogDir: logDir,
		Command: func(_, _ string) *exec.Cmd { return exec.Command(bin, args...) },
		// The machineclaim controller's workers start once the process
		// holds the Lease: from then on it reconciles.
		Ready: func(line string) bool {
			return strings.Contains(line, "Starting workers") && strings.Contains(line, `"controller":"machineclaim"`)
		},
	}, "a", "b")
	return &operators{Set: set, logDir: logDir, c: e.c}
}

func operatorArgs(kubeconfig string, cfg config) []string {
	return []string{"run",
		"--kubeconfig", kubeconfig,
		"--leader-elect=true", "--leader-election-namespace", operatorNamespace,
		"--leader-election-lease-duration", cfg.leaseDuration.String(),
		"--leader-election-renew-deadline", cfg.renewDeadline.String(),
		"--leader-election-retry-period", cfg.retryPeriod.String(),
		"--operator-namespace", operatorNamespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--controllers", controllers,
		"--orphan-grace", cfg.orphanGrace.String(), "--orphan-sweep-interval", cfg.sweepInterval.String(),
		"--machine-observe-interval", "10s",
	}
}

// holder reads the Lease's holder; "" when there is none yet.
func (o *operators) holder(ctx context.Context) (string, error) {
	return replicas.LeaseHolder(ctx, o.c, operatorNamespace, leaseName)
}
