// Command installyaml renders the one-file install of a release: the
// Kustomize base (CRDs, Namespace, RBAC, the manager) with the manager's
// image set to the release's, as `kubectl apply --server-side -f
// install.yaml` takes it. The release workflow attaches its output to every
// GitHub release; `make install-yaml IMAGE=…` renders it locally.
//
//	go run ./hack/installyaml -image ghcr.io/hyperfleet/hyperfleet@sha256:… > install.yaml
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

func main() {
	image := flag.String("image", "", "the manager's image, by digest (repository@sha256:…) or tag")
	flag.Parse()
	if err := render(os.Stdout, ".", *image); err != nil {
		fmt.Fprintf(os.Stderr, "installyaml: %v\n", err)
		os.Exit(1)
	}
}

func render(w io.Writer, root, image string) error {
	if image == "" {
		return fmt.Errorf("-image is required: the release's image, by digest")
	}
	data, err := gitops.InstallYAML(root, image)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}
