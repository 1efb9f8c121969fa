package testcluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// MainWith is testenv.MainWith on a whole cluster: the package's control
// plane gets the scheduler, the controller-manager and kwok's nodes before
// setup runs, and they stop after the tests.
//
//	func TestMain(m *testing.M) { testcluster.MainWith(m, setup) }
func MainWith(m *testing.M, setup func() (teardown func(), err error)) {
	testenv.MainWith(m, func() (func(), error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		bins, err := controlplane.FindClusterBinaries(ctx, os.Stderr)
		if err != nil {
			return nil, err
		}
		cluster, err := Start(ctx, Options{Config: testenv.Config(), Binaries: bins})
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
	})
}
