package crd_test

import (
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/hyperfleet/hyperfleet/kustomize/crd"
)

// The kustomization Argo CD or Flux applies first must hold exactly the CRDs
// the operator is built with: a CRD generated but not listed would never reach
// a cluster.
func TestKustomizationShipsEveryCRD(t *testing.T) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build kustomize/crd: %v", err)
	}
	shipped := map[string]bool{}
	for _, r := range res.Resources() {
		if r.GetKind() != "CustomResourceDefinition" {
			t.Errorf("unexpected %s %s in the CRD kustomization", r.GetKind(), r.GetName())
		}
		shipped[r.GetName()] = true
	}
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crds {
		if !shipped[c.Name] {
			t.Errorf("CRD %s is generated but not listed in kustomize/crd/kustomization.yaml", c.Name)
		}
	}
	if len(shipped) != len(crds) {
		t.Errorf("kustomization ships %d CRDs, the operator has %d", len(shipped), len(crds))
	}
}
