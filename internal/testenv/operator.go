package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
)

// BuildOperator builds the real hyperfleet binary into dir, as `make build`
// does, for the harnesses that run the operator as its own process (the
// memory benchmark, the chaos run); with tags (hourglass) the build they
// select.
func BuildOperator(ctx context.Context, dir string, tags ...string) (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hyperfleet")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/hyperfleet")...) //nolint:gosec // bin is a path under the caller's directory, tags the caller's own constants, not outside input
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building ./cmd/hyperfleet: %w\n%s", err, out)
	}
	return bin, nil
}
