package gitops

import (
	"fmt"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hyperfleet/hyperfleet/internal/manifests"
)

// RenderChart renders ch with Helm's own engine, as `helm install` (and
// `helm template`) does for the release "hyperfleet" in namespace, for a
// cluster with caps (nil: Helm's defaults, as `helm template` without
// --api-versions), and returns its objects: the templates' in file order,
// then the CRDs of crds/.
func RenderChart(ch *chartv2.Chart, namespace string, values map[string]any, caps *common.Capabilities) ([]*unstructured.Unstructured, error) {
	vals, err := util.ToRenderValues(ch, values, common.ReleaseOptions{Name: "hyperfleet", Namespace: namespace, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		decoded, err := manifests.Decode(name, []byte(out[name]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", name, err, out[name])
		}
		objs = append(objs, decoded...)
	}
	for _, crd := range ch.CRDObjects() {
		decoded, err := manifests.Decode(crd.Name, crd.File.Data)
		if err != nil {
			return nil, err
		}
		objs = append(objs, decoded...)
	}
	return objs, nil
}
