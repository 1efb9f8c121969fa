package manager

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The reconcilers whose worker count --workers sets, by the name it takes.
const (
	WorkersHypervisorCluster         = "hypervisorcluster"
	WorkersHypervisorMachineTemplate = "hypervisormachinetemplate"
	WorkersMachineClaim              = "machineclaim"
	WorkersCyberdesk                 = "cyberdesk"
	WorkersRunnerPool                = "runnerpool"
	WorkersRunner                    = "runner"
	WorkersPerformer                 = "performer"
	WorkersExecutor                  = "hourglassexecutor"
)

var workerNames = []string{WorkersHypervisorCluster, WorkersHypervisorMachineTemplate, WorkersMachineClaim, WorkersCyberdesk, WorkersRunnerPool, WorkersRunner, WorkersPerformer, WorkersExecutor}

// maxWorkers bounds a count: past it the workers only queue on the API
// server's priority-and-fairness seats and the manager's memory grows.
const maxWorkers = 256

// Workers are worker counts per reconciler; a reconciler not named keeps
// the default its package chose from `make bench` (docs/performance.md).
type Workers map[string]int

// For returns the count for name, 0 meaning the reconciler's default.
func (w Workers) For(name string) int { return w[name] }

// parseWorkers reads "performer=16,machineclaim=8".
func parseWorkers(s string) (Workers, error) {
	w := Workers{}
	for _, item := range splitList(s) {
		name, count, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("--workers: %q is not name=count (for example performer=16)", item)
		}
		name = strings.TrimSpace(name)
		if !slices.Contains(workerNames, name) {
			return nil, fmt.Errorf("--workers: unknown reconciler %q; known: %s", name, strings.Join(workerNames, ", "))
		}
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil || n < 1 || n > maxWorkers {
			return nil, fmt.Errorf("--workers: %s=%s: the count must be a whole number from 1 to %d", name, count, maxWorkers)
		}
		w[name] = n
	}
	return w, nil
}
