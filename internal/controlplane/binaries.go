// Package controlplane starts a real kube-apiserver and etcd, built from Go
// module sources by hack/controlplane.sh, for the test suites and the
// `hyperfleet-dev` sandbox.
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

// hasBinaries checks dir holds the named executables (kube-apiserver and
// etcd when none are named).
func hasBinaries(dir string, names ...string) error {
	if len(names) == 0 {
		names = []string{"kube-apiserver", "etcd"}
	}
	for _, name := range names {
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

// ClusterBinaries are the directories hack/controlplane.sh --cluster fills.
type ClusterBinaries struct {
	// Dir holds kube-apiserver, etcd, kube-scheduler and kube-controller-manager.
	Dir string
	// KwokDir holds kwok.
	KwokDir string
}

// FindClusterBinaries runs hack/controlplane.sh --cluster, which reuses the
// cache or builds the scheduler, the controller-manager and kwok beside the
// API server (minutes, cold), streaming its progress to progress. Unlike
// BinaryDir it does not stop at KUBEBUILDER_ASSETS: that directory may
// predate the cluster binaries, and the script knows where they live.
func FindClusterBinaries(ctx context.Context, progress io.Writer) (ClusterBinaries, error) {
	root, err := RepoRoot()
	if err != nil {
		return ClusterBinaries{}, err
	}
	script := filepath.Join(root, buildScript)
	build := exec.CommandContext(ctx, "bash", script, "--cluster") //nolint:gosec // the repository's own build script, found by RepoRoot
	build.Dir = root
	build.Stdout, build.Stderr = progress, progress
	if err := build.Run(); err != nil {
		return ClusterBinaries{}, fmt.Errorf("building the cluster binaries with %s --cluster: %w", buildScript, err)
	}
	out, err := exec.CommandContext(ctx, "bash", script, "--cluster", "--print-dir").Output() //nolint:gosec // as above
	if err != nil {
		return ClusterBinaries{}, fmt.Errorf("locating the cluster binaries with %s --cluster --print-dir: %w", buildScript, err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2 {
		return ClusterBinaries{}, fmt.Errorf("%s --cluster --print-dir printed %q, want two directories", buildScript, out)
	}
	bins := ClusterBinaries{Dir: lines[0], KwokDir: lines[1]}
	for dir, names := range map[string][]string{bins.Dir: {"kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager"}, bins.KwokDir: {"kwok"}} {
		if err := hasBinaries(dir, names...); err != nil {
			return ClusterBinaries{}, err
		}
	}
	return bins, nil
}
