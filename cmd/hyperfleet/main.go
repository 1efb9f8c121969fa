// Command hyperfleet is the HyperFleet operator.
//
//	hyperfleet run      the manager, against a cluster (kubeconfig or in-cluster)
//	hyperfleet tpm-provision  on a hypervisor host: a DevID into a machine's TPM
//	hyperfleet release-finalizers  the operator gone: let a namespace be deleted (docs/uninstall.md)
//	hyperfleet version  the build's version
//
// The sandbox is cmd/hyperfleet-dev (make dev): this binary holds the
// product only. Built with -tags hourglass it holds the Hourglass
// reconcilers alone, without tpm-provision and release-finalizers
// (docs/install.md).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/go-logr/logr"

	"github.com/hyperfleet/hyperfleet/internal/logging"
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	cs := []command{{"run", "Run the manager against a cluster (kubeconfig or in-cluster).", runManager}}
	cs = append(cs, machineCommands()...)
	return append(cs, command{"version", "Print the version.", runVersion})
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		if err := c.run(args[1:], stdout, stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			_, _ = fmt.Fprintf(stderr, "hyperfleet %s: %v\n", c.name, err)
			return 1
		}
		return 0
	}
	_, _ = fmt.Fprintf(stderr, "hyperfleet: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Usage: hyperfleet <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'hyperfleet <command> -h' for a command's flags.\n")
	_, _ = io.WriteString(w, b.String())
}

// parseWithLogger parses a command's flags, refuses stray arguments, and
// installs the logger the flags ask for as the process's: controller-runtime's,
// klog's (client-go) and the standard log package's (logging.Setup).
func parseWithLogger(fs *flag.FlagSet, args []string, logOpts *logging.Options) (logr.Logger, error) {
	if err := fs.Parse(args); err != nil {
		return logr.Discard(), err
	}
	if fs.NArg() > 0 {
		return logr.Discard(), fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return logging.Setup(*logOpts)
}
