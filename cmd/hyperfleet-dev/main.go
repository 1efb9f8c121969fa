// Command hyperfleet-dev is HyperFleet's development sandbox, kept out of
// the product binary: it links the simulators (Proxmox, GitHub, KubeVirt,
// SPIRE, a software TPM) and the test control plane, which
// cmd/hyperfleet never does (hack/verify.sh checks).
//
//	hyperfleet-dev               the embedded sandbox: a real control plane, the manager, the samples
//	hyperfleet-dev enqueue-jobs  queue GitHub Actions jobs on the sandbox's simulated GitHub
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the sandbox, or the subcommand args name.
func dispatch(args []string, stdout, stderr io.Writer) int {
	run, name := runSandbox, "hyperfleet-dev"
	if len(args) > 0 && args[0] == "enqueue-jobs" {
		run, name, args = runEnqueue, "hyperfleet-dev enqueue-jobs", args[1:]
	}
	if err := run(args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		_, _ = fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}
