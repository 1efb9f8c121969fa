package gitops_test

import (
	"path/filepath"
	"slices"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
)

// The chart renders the MachineClaim finalizer policy where the cluster
// serves MutatingAdmissionPolicy (Kubernetes 1.36) and the value is on (its
// default): then it makes the base plus the component's objects; with the
// value off, or on a cluster without the API, exactly the base's.
func TestChartFinalizerPolicyToggle(t *testing.T) {
	ch, err := loader.Load(filepath.Join(root, gitops.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	base := built(t, gitops.BaseDir)
	with := built(t, gitops.BaseDir, gitops.FinalizerPolicyDir)
	if len(with) <= len(base) {
		t.Fatalf("the component %s adds nothing to the base", gitops.FinalizerPolicyDir)
	}
	serving := *common.DefaultCapabilities
	serving.APIVersions = append(slices.Clone(serving.APIVersions), gitops.FinalizerPolicyAPI)

	sameObjects(t, renderOn(t, ch, gitops.Namespace, nil, &serving), with)
	off := map[string]any{"machineClaimFinalizerPolicy": map[string]any{"enabled": false}}
	sameObjects(t, renderOn(t, ch, gitops.Namespace, off, &serving), base)
	sameObjects(t, renderOn(t, ch, gitops.Namespace, nil, common.DefaultCapabilities), base)
}
