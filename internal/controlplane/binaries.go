// Package controlplane starts a real kube-apiserver and etcd, built from Go
// module sources by hack/controlplane.sh, for the test suites and the
// `hyperfleet dev` sandbox.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// assetsEnv is the variable envtest itself reads; when set it wins.
const assetsEnv = "KUBEBUILDER_ASSETS"

// buildScript is the script, relative to the repository root, that builds and
// caches the binaries.
const buildScript = "hack/controlplane.sh"

// BinaryDir returns a directory holding kube-apiserver and etcd. It honours
// KUBEBUILDER_ASSETS; otherwise it finds the repository from the working
// directory and runs hack/controlplane.sh, which reuses the cache under bin/
// or builds the binaries (minutes, cold), streaming its progress to progress.
func BinaryDir(ctx context.Context, progress io.Writer) (string, error) {
	if dir := os.Getenv(assetsEnv); dir != "" {
		if err := hasBinaries(dir); err != nil {
			return "", fmt.Errorf("%s=%s: %w", assetsEnv, dir, err)
		}
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, buildScript)
	// First pass: build when missing, with the script's progress on progress.
	build := exec.CommandContext(ctx, "bash", script) //nolint:gosec // the repository's own build script, found by RepoRoot
	build.Dir = root
	build.Stdout, build.Stderr = progress, progress
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building the control plane with %s: %w", buildScript, err)
	}
	out, err := exec.CommandContext(ctx, "bash", script, "--print-dir").Output() //nolint:gosec // as above
	if err != nil {
		return "", fmt.Errorf("locating the control plane with %s --print-dir: %w", buildScript, err)
	}
	dir := strings.TrimSpace(string(out))
	if err := hasBinaries(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// RepoRoot walks up from the working directory to the directory holding
// hack/controlplane.sh.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the HyperFleet repository (hack/controlplane.sh) above the working directory: " +
				"run from a checkout, or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd")
		}
		dir = parent
	}
}

func hasBinaries(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd"} {
		info, err := os.Stat(filepath.Join(dir, name)) //nolint:gosec // a directory the developer chose (KUBEBUILDER_ASSETS) is meant to be read
		if err != nil {
			return fmt.Errorf("control plane binary %s missing in %s: run 'make controlplane'", name, dir)
		}
		if info.Mode()&0o111 == 0 {
			return fmt.Errorf("control plane binary %s in %s is not executable", name, dir)
		}
	}
	return nil
}
