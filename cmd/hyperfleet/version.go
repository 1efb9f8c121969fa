package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/hyperfleet/hyperfleet/internal/version"
)

func runVersion(_ []string, stdout, _ io.Writer) error {
	_, err := fmt.Fprintf(stdout, "hyperfleet %s (%s %s/%s)\n", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
