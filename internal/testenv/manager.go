package testenv

import (
	"context"
	"fmt"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// StartManager runs mgr until the returned stop is called; stop waits for
// mgr to return, so a suite's teardown does not race the manager's last
// reconciles. An error mgr ends with is printed, not returned: by then the
// tests have their result.
func StartManager(mgr manager.Manager) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}
}
