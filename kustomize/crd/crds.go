// Package crd embeds the generated CustomResourceDefinitions, so the test
// suites and `hyperfleet-dev` install exactly what kustomize/ ships.
package crd

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed bases/*.yaml
var bases embed.FS

// CRDs returns every HyperFleet CustomResourceDefinition.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(bases, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, name := range files {
		data, err := bases.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", name, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// records are the kinds the operator keeps as its own records, not desired
// state anyone applies: RunnerJob (one per GitHub job, runner demand that
// survives restarts). A record has no conditions and no status subresource
// (its state is written with it, in one request), kstatus reads it as
// Current, and Argo CD needs no health check for it.
var records = map[string]bool{"runnerjobs.hypervisor.hyperfleet.io": true}

// IsRecord reports whether the CRD named name is an operator record.
func IsRecord(name string) bool { return records[name] }
