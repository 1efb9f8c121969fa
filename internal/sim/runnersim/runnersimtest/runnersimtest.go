// Package runnersimtest is what tests that run the real bootstrap agent in
// a simulated VM (runnersim.Process) share: the agent and the fake actions
// runner built from source, a VM's filesystem with the runner installed,
// and a console to read the agent's output from.
package runnersimtest

import (
	"bytes"
	"sync"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
)

// BuildAgent builds hyperfleet-bootstrap and the fake actions runner
// (runnersim.BuildAgent) into the test's temporary directory.
func BuildAgent(t testing.TB) (agent, fakeRunner string) {
	t.Helper()
	agent, fakeRunner, err := runnersim.BuildAgent(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return agent, fakeRunner
}

// VMRoot makes a simulated VM's filesystem under base with the fake runner
// preinstalled (runnersim.VMRoot).
func VMRoot(t testing.TB, base, name, fakeRunner string) (root, install string) {
	t.Helper()
	root, install, err := runnersim.VMRoot(base, name, fakeRunner)
	if err != nil {
		t.Fatal(err)
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
