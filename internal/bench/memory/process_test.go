package memory

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/bench/proc"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// operator is the hyperfleet binary running as its own process.
type operator struct {
	*proc.Process
	// pprof is the address of the process's /debug/pprof/.
	pprof string
}

// startOperator runs `hyperfleet run` with the production defaults of every
// flag except what a benchmark process cannot have (ports, a Lease). The
// kubeconfig goes through KUBECONFIG, the way a Deployment's in-cluster
// config goes through the same loader.
func startOperator(b *testing.B, bin string, args ...string) *operator {
	b.Helper()
	kubeconfig, err := testenv.Kubeconfig()
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		b.Fatal(err)
	}
	pprof, err := proc.FreeAddress()
	if err != nil {
		b.Fatal(err)
	}
	args = append([]string{"run", "--leader-elect=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--webhook-bind-address=0", "--log-level=error",
		"--pprof-bind-address=" + pprof}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+path)
	if limit := os.Getenv("MEMORY_GOMEMLIMIT"); limit != "" {
		// As the Deployment sets it from the container's memory limit.
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+limit)
	}
	if gc := os.Getenv("MEMORY_GOGC"); gc != "" {
		// Overrides the operator's --gc-percent, to compare with Go's default.
		cmd.Env = append(cmd.Env, "GOGC="+gc)
	}
	p, err := proc.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Stop)
	return &operator{Process: p, pprof: pprof}
}

// alive fails the benchmark, with the operator's log, if it has exited.
func (o *operator) alive(b *testing.B) {
	b.Helper()
	if err := o.Exited(); err != nil {
		b.Fatal(err)
	}
}

// heap is what the Go runtime of the process says of its heap.
type heap struct {
	// Alloc is the live heap after a collection (HeapAlloc).
	Alloc int64
	// Sys is what the runtime holds from the OS for everything (Sys).
	Sys int64
}

// heapProfile forces a collection in the process, saves its heap profile
// to path (for go tool pprof), and returns its runtime's figures.
func (o *operator) heapProfile(path string) (heap, error) {
	get := func(query string) ([]byte, error) {
		resp, err := http.Get("http://" + o.pprof + "/debug/pprof/heap?" + query)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("heap profile: %s", resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	profile, err := get("gc=1")
	if err != nil {
		return heap{}, err
	}
	if err := os.WriteFile(path, profile, 0o600); err != nil {
		return heap{}, err
	}
	text, err := get("debug=1")
	if err != nil {
		return heap{}, err
	}
	var h heap
	for _, line := range strings.Split(string(text), "\n") {
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if !ok || err != nil {
			continue
		}
		switch name {
		case "HeapAlloc":
			h.Alloc = n
		case "Sys":
			h.Sys = n
		}
	}
	return h, nil
}
