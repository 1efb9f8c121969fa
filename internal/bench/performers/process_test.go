package performers

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// operator is the hyperfleet binary running as its own process, so the
// resident set and CPU time are the operator's alone. (The helpers follow
// internal/bench/memory's, which live in that package's tests.)
type operator struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu       sync.Mutex
	stderr   bytes.Buffer
	peak     int64 // highest VmRSS sampled, bytes
	sampling chan struct{}
}

// startOperator runs `hyperfleet run` with its production defaults except
// what a benchmark process cannot have (ports, a Lease) and the
// reconcilers a Performer does not need. The kubeconfig goes through
// KUBECONFIG, as the fast column did; both paths now get the same
// client (cmd/hyperfleet's test).
func startOperator(b *testing.B, bin string) *operator {
	b.Helper()
	args := []string{"run", "--leader-elect=false",
		// Plain HTTP on loopback: the benchmark reads the worker count the
		// reconciler really runs with from controller-runtime's gauge.
		"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=0", "--webhook-bind-address=0", "--log-level=error",
		"--controllers=hourglass"}
	if n := envInt("PERF_WORKERS", 0); n > 0 {
		args = append(args, "--workers=performer="+strconv.Itoa(n))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	o := &operator{cmd: cmd, done: make(chan struct{}), sampling: make(chan struct{})}
	cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.stderr.Write(p)
	})
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

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// sample reads the resident set every 250 ms and keeps the peak.
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
			if rss, err := procStatus(o.cmd.Process.Pid, "VmRSS"); err == nil {
				o.mu.Lock()
				o.peak = max(o.peak, rss)
				o.mu.Unlock()
			}
		}
	}
}

func (o *operator) peakRSS() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.peak
}

// cpu is the CPU time the process has used, user and system, from
// /proc/<pid>/stat (fields 14 and 15, in ticks of 1/100 s on Linux).
func (o *operator) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", o.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, may hold spaces.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", o.cmd.Process.Pid)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
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

// stop sends SIGTERM, as the kubelet would, and waits for the exit.
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
