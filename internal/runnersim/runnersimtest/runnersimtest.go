// Package runnersimtest is what tests that run the real bootstrap agent in
// a simulated VM (runnersim.Process) share: the agent and the fake actions
// runner built from source, a VM's filesystem with the runner installed,
// and a console to read the agent's output from.
package runnersimtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// BuildAgent builds hyperfleet-bootstrap and the fake actions runner
// (cmd/hyperfleet-bootstrap/testdata/fakerunner, which speaks to githubsim).
func BuildAgent(t testing.TB) (agent, fakeRunner string) {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg string }{
		{"hyperfleet-bootstrap", "github.com/hyperfleet/hyperfleet/cmd/hyperfleet-bootstrap"},
		{"fakerunner", "github.com/hyperfleet/hyperfleet/cmd/hyperfleet-bootstrap/testdata/fakerunner"},
	} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg).CombinedOutput(); err != nil { //nolint:gosec // the module's own packages
			t.Fatalf("building %s: %v\n%s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, "hyperfleet-bootstrap"), filepath.Join(dir, "fakerunner")
}

// VMRoot makes a simulated VM's filesystem under base with the fake runner
// preinstalled in opt/actions-runner, traversable by the runner's user.
func VMRoot(t testing.TB, base, name, fakeRunner string) (root, install string) {
	t.Helper()
	root = filepath.Join(base, name)
	install = filepath.Join(root, "opt", "actions-runner")
	if err := os.MkdirAll(filepath.Join(install, "bin"), 0o755); err != nil { //nolint:gosec // the runner's user must traverse it
		t.Fatal(err)
	}
	bin, err := os.ReadFile(fakeRunner) //nolint:gosec // built by BuildAgent
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"bin/fakerunner": bin,
		"config.sh":      []byte("#!/bin/sh\nexec \"$(dirname \"$0\")/bin/fakerunner\" config \"$@\"\n"),
		"run.sh":         []byte("#!/bin/sh\nexec \"$(dirname \"$0\")/bin/fakerunner\" run \"$@\"\n"),
	} {
		if err := os.WriteFile(filepath.Join(install, name), data, 0o755); err != nil { //nolint:gosec // executables
			t.Fatal(err)
		}
	}
	return root, install
}

// Console is an agent's console: written by the process's output copier,
// read by the test.
type Console struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Console) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Console) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
