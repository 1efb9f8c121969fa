package memory

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// operator is the hyperfleet binary running as its own process.
type operator struct {
	cmd *exec.Cmd
	// pprof is the address of the process's /debug/pprof/.
	pprof  string
	stderr *bytes.Buffer
	done   chan struct{}

	mu       sync.Mutex
	peak     int64 // highest VmRSS sampled, bytes
	samples  int
	sampling chan struct{}
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
	pprof, err := freeAddress()
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
	o := &operator{cmd: cmd, pprof: pprof, stderr: &bytes.Buffer{}, done: make(chan struct{}), sampling: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &o.mu, w: o.stderr}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(o.done)
	}()
	go o.sample()
	b.Cleanup(o.stop)
	return o
}

// sample reads the process's resident set every 250 ms and keeps the peak.
// It samples rather than read VmHWM, the kernel's peak since the process
// started, so that resetPeak can open a window and one phase of the run
// (idle among unrelated objects, then claims) gets a peak of its own.
func (o *operator) sample() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-o.done:
			return
		case <-o.sampling:
			return
		case <-tick.C:
			if rss, err := o.rss(); err == nil {
				o.mu.Lock()
				o.peak = max(o.peak, rss)
				o.samples++
				o.mu.Unlock()
			}
		}
	}
}

// rss reads VmRSS from /proc/<pid>/status, in bytes.
func (o *operator) rss() (int64, error) {
	return procStatus(o.cmd.Process.Pid, "VmRSS")
}

// cpu is the CPU time the process has used, user and system, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func (o *operator) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", o.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, may hold spaces; the fields after it
	// start past its closing parenthesis.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", o.cmd.Process.Pid)
	}
	var ticks int64
	for _, v := range f[11:13] { // utime, stime: fields 14 and 15 overall
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// resetPeak starts the peak over, from the current resident set.
func (o *operator) resetPeak() {
	rss, _ := o.rss()
	o.mu.Lock()
	o.peak = rss
	o.mu.Unlock()
}

func (o *operator) peakRSS() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.peak
}

// alive fails the benchmark, with the operator's log, if it has exited.
func (o *operator) alive(b *testing.B) {
	b.Helper()
	select {
	case <-o.done:
		o.mu.Lock()
		defer o.mu.Unlock()
		b.Fatalf("the operator exited: %v\n%s", o.cmd.ProcessState, o.stderr.String())
	default:
	}
}

func (o *operator) stop() {
	select {
	case <-o.done:
		return
	default:
	}
	close(o.sampling)
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.done:
	case <-time.After(30 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.done
	}
}

// procStatus reads one "<field>: <n> kB" line of /proc/<pid>/status.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, value, ok := strings.Cut(s.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// lockedWriter lets the process write its log while the benchmark reads it.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// freeAddress returns a localhost address no one listens on.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
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
