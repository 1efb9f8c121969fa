package gitops

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ProdPDB is the manager's PodDisruptionBudget of overlays/prod, which the
// chart offers behind podDisruptionBudget.enabled.
const ProdPDB = "overlays/prod/pdb.yaml"

const phPDBMin = "__HF_PDB_MIN_AVAILABLE__"

// pdbTemplate is the chart's PodDisruptionBudget: overlays/prod's, with
// minAvailable a value. With replicas 1 and minAvailable 1 a node drain
// waits for ever, so it is off by default, like the base's single replica.
func pdbTemplate(root string) (name string, text []byte, minAvailable any, err error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(ProdPDB))) //nolint:gosec // a file of this repository
	if err != nil {
		return "", nil, nil, err
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w", ProdPDB, err)
	}
	minAvailable, found, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "minAvailable")
	if err != nil || !found {
		return "", nil, nil, fmt.Errorf("%s: no spec.minAvailable", ProdPDB)
	}
	if err := unstructured.SetNestedField(u.Object, phPDBMin, "spec", "minAvailable"); err != nil {
		return "", nil, nil, err
	}
	name, text, err = template(u, ".Values.podDisruptionBudget.enabled")
	return name, text, minAvailable, err
}
