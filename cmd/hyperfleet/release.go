//go:build !hourglass

package main

import (
	"io"

	"github.com/hyperfleet/hyperfleet/internal/uninstall"
)

// runReleaseFinalizers is `hyperfleet release-finalizers` (internal/uninstall).
func runReleaseFinalizers(args []string, stdout, stderr io.Writer) error {
	return uninstall.Command(args, stdout, stderr, restConfig)
}
