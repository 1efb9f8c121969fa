package gitops

import (
	"bytes"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ManagerDeployment is the manager's Deployment in the base.
const ManagerDeployment = "hyperfleet-manager"

// InstallYAML renders the base as one multi-document file with the
// manager's image replaced by image: a release's install.yaml. The objects
// keep kustomize's order, which puts CRDs and the Namespace first.
func InstallYAML(root, image string) ([]byte, error) {
	objs, err := Build(root, BaseDir)
	if err != nil {
		return nil, err
	}
	d := Find(objs, "Deployment", ManagerDeployment)
	if d == nil {
		return nil, fmt.Errorf("the base has no Deployment %s", ManagerDeployment)
	}
	containers, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return nil, fmt.Errorf("the manager Deployment %s has no containers", ManagerDeployment)
	}
	containers[0].(map[string]any)["image"] = image
	if err := unstructured.SetNestedSlice(d.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# HyperFleet, rendered from kustomize/ with the manager image " + image + ".\n")
	b.WriteString("# kubectl apply --server-side -f install.yaml (docs/install.md).\n")
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.Bytes(), nil
}
