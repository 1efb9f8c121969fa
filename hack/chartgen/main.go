// Command chartgen writes what is generated from the Kustomize base: the Helm
// chart charts/hyperfleet and argocd/argocd-cm-patch.yaml. Run it from the
// repository root (make chart); make verify fails when its output is stale.
package main

import (
	"fmt"
	"os"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

func main() {
	files, err := gitops.Generate(".")
	if err == nil {
		err = gitops.Write(".", files)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chartgen: %v\n", err)
		os.Exit(1)
	}
}
