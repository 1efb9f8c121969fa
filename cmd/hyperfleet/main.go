// Command hyperfleet is the HyperFleet operator.
//
//	hyperfleet run      the manager, against a cluster (kubeconfig or in-cluster)
//	hyperfleet dev      the embedded sandbox: a real control plane, the manager, the samples
//	hyperfleet version  the build's version
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "Run the manager against a cluster (kubeconfig or in-cluster).", runManager},
		{"dev", "Run the embedded sandbox: control plane, CRDs, manager and samples.", runDev},
		{"version", "Print the version.", runVersion},
	}
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
			if err == flag.ErrHelp {
				return 0
			}
			fmt.Fprintf(stderr, "hyperfleet %s: %v\n", c.name, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "hyperfleet: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: hyperfleet <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'hyperfleet <command> -h' for a command's flags.")
}
