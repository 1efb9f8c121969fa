package sandbox

import (
	"context"
	"io"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
)

// startCluster runs the scheduler, the controller-manager and KWOK's
// simulated nodes beside the API server, so the sample Performers and the
// executor's Deployment really run (as Pods on simulated nodes) instead of
// staying Pending. It returns the simulated nodes' names (none when the
// binaries are missing) and the function that stops them.
func startCluster(ctx context.Context, cfg *rest.Config, say func(string, ...any), progress io.Writer) ([]string, func(), error) {
	bins, err := controlplane.FindClusterBinaries(ctx, progress)
	if err != nil {
		// Outside a checkout (KUBEBUILDER_ASSETS alone) the API server still
		// serves every kind; say plainly what is missing rather than refuse.
		say("==> Not starting the scheduler, controller-manager and KWOK: %v", err)
		say("    Pods will stay Pending; run 'make controlplane' in a HyperFleet checkout for the whole cluster")
		return nil, func() {}, nil
	}
	say("==> Starting kube-scheduler, kube-controller-manager and KWOK (simulated nodes)")
	cluster, err := testcluster.Start(ctx, testcluster.Options{Config: cfg, Binaries: bins})
	if err != nil {
		return nil, nil, err
	}
	say("==> Nodes Ready: %s", strings.Join(cluster.NodeNames, ", "))
	return cluster.NodeNames, func() {
		say("==> Stopping kube-scheduler, kube-controller-manager and KWOK")
		if err := cluster.Stop(); err != nil {
			say("    stopping the cluster: %v", err)
		}
	}, nil
}
