package runnersim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildAgent builds hyperfleet-bootstrap and the fake actions runner
// (cmd/hyperfleet-bootstrap/testdata/fakerunner, which speaks to githubsim)
// into dir with the go command, from the module the working directory is
// in, and returns their paths.
func BuildAgent(ctx context.Context, dir string) (agent, fakeRunner string, err error) {
	for _, b := range []struct{ out, pkg string }{
		{"hyperfleet-bootstrap", "github.com/hyperfleet/hyperfleet/cmd/hyperfleet-bootstrap"},
		{"fakerunner", "github.com/hyperfleet/hyperfleet/cmd/hyperfleet-bootstrap/testdata/fakerunner"},
	} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, b.out), b.pkg).CombinedOutput(); err != nil { //nolint:gosec // the module's own packages
			return "", "", fmt.Errorf("building %s: %w\n%s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, "hyperfleet-bootstrap"), filepath.Join(dir, "fakerunner"), nil
}

// VMRoot makes a simulated VM's filesystem under base with the fake runner
// preinstalled in opt/actions-runner, traversable by the runner's user.
func VMRoot(base, name, fakeRunner string) (root, install string, err error) {
	root = filepath.Join(base, name)
	install = filepath.Join(root, "opt", "actions-runner")
	if err := os.MkdirAll(filepath.Join(install, "bin"), 0o755); err != nil { //nolint:gosec // the runner's user must traverse it
		return "", "", err
	}
	bin, err := os.ReadFile(fakeRunner) //nolint:gosec // built by BuildAgent
	if err != nil {
		return "", "", err
	}
	for name, data := range map[string][]byte{
		"bin/fakerunner": bin,
		"config.sh":      []byte("#!/bin/sh\nexec \"$(dirname \"$0\")/bin/fakerunner\" config \"$@\"\n"),
		"run.sh":         []byte("#!/bin/sh\nexec \"$(dirname \"$0\")/bin/fakerunner\" run \"$@\"\n"),
	} {
		if err := os.WriteFile(filepath.Join(install, name), data, 0o755); err != nil { //nolint:gosec // executables
			return "", "", err
		}
	}
	return root, install, nil
}
