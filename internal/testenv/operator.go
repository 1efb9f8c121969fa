package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
)

// BuildOperator builds the real hyperfleet binary into dir, as `make build`
// does, for the harnesses that run the operator as its own process (the
// memory benchmark, the chaos run).
func BuildOperator(ctx context.Context, dir string) (string, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hyperfleet")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hyperfleet") //nolint:gosec // bin is a path under the caller's directory, not outside input
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building ./cmd/hyperfleet: %w\n%s", err, out)
	}
	return bin, nil
}
