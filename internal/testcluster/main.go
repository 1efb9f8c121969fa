package testcluster

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
)

// Around wraps a suite's setup for testenv.MainWith so the suite runs on a
// whole cluster: the package's control plane (config reaches it) gets the
// scheduler, the controller-manager and kwok's nodes before setup runs, and
// they stop after the tests.
//
//	func TestMain(m *testing.M) { testenv.MainWith(m, testcluster.Around(testenv.Config, setup)) }
//
// It takes the config rather than importing testenv, so `hyperfleet-dev`
// can use this package without linking the test helpers.
func Around(config func() *rest.Config, setup func() (teardown func(), err error)) func() (func(), error) {
	return func() (func(), error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		bins, err := controlplane.FindClusterBinaries(ctx, os.Stderr)
		if err != nil {
			return nil, err
		}
		cluster, err := Start(ctx, Options{Config: config(), Binaries: bins})
		if err != nil {
			return nil, err
		}
		teardown := func() {}
		if setup != nil {
			if teardown, err = setup(); err != nil {
				_ = cluster.Stop()
				return nil, err
			}
		}
		return func() {
			teardown()
			if err := cluster.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "testcluster: %v\n", err)
			}
		}, nil
	}
}
