// Package proc runs a benchmarked program as its own process and reads
// what the kernel says of it: its resident set (sampled for a peak), its
// CPU time and its log. The benchmarks under internal/bench measure the
// real `hyperfleet run` this way, so the figures are the operator's alone.
package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sampleEvery paces the resident-set samples: often enough to catch a
// burst's peak, rarely enough to cost nothing measurable.
const sampleEvery = 250 * time.Millisecond

// Process is a started command.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu       sync.Mutex
	stderr   bytes.Buffer
	peak     int64 // highest VmRSS sampled, bytes
	sampling chan struct{}
	stopped  bool
}

// Start starts cmd, keeps its standard error as its log, and samples its
// resident set until it exits or Stop is called.
func Start(cmd *exec.Cmd) (*Process, error) {
	p := &Process{cmd: cmd, done: make(chan struct{}), sampling: make(chan struct{})}
	cmd.Stderr = lockedWriter{p}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	go p.sample()
	return p, nil
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited says why the process is no longer running, with its log; nil
// while it runs.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v\n%s", p.cmd.Path, p.cmd.ProcessState, p.Log())
	default:
		return nil
	}
}

// Log is what the process wrote to standard error so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// sample reads the resident set every sampleEvery and keeps the peak. It
// samples rather than read VmHWM, the kernel's peak since the start, so
// that ResetPeak can open a window and one phase of a run gets a peak of
// its own.
func (p *Process) sample() {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-p.sampling:
			return
		case <-tick.C:
			if rss, err := p.RSS(); err == nil {
				p.mu.Lock()
				p.peak = max(p.peak, rss)
				p.mu.Unlock()
			}
		}
	}
}

// RSS is the resident set now, in bytes.
func (p *Process) RSS() (int64, error) { return p.Status("VmRSS") }

// Status reads one "<field>: <n> kB" line of /proc/<pid>/status, in bytes
// (VmRSS, RssAnon, RssFile, …).
func (p *Process) Status(field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.Pid())) //nolint:gosec // a pid we started, not input
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
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, p.Pid())
}

// ResetPeak starts the peak over, from the resident set now.
func (p *Process) ResetPeak() {
	rss, _ := p.RSS()
	p.mu.Lock()
	p.peak = rss
	p.mu.Unlock()
}

// PeakRSS is the highest resident set sampled since the start or the last
// ResetPeak, in bytes.
func (p *Process) PeakRSS() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

// CPU is the CPU time the process has used, user and system, from
// /proc/<pid>/stat.
func (p *Process) CPU() (time.Duration, error) {
	_, cpu, err := readStat(p.Pid())
	return cpu, err
}

// Stop sends SIGTERM, as the kubelet would, and waits for the exit; after
// 30 s it kills the process. Calling it again does nothing.
func (p *Process) Stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	p.mu.Unlock()
	close(p.sampling)
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// lockedWriter lets the process write its log while a benchmark reads it.
type lockedWriter struct{ p *Process }

func (l lockedWriter) Write(b []byte) (int, error) {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	return l.p.stderr.Write(b)
}

// FreeAddress returns a loopback address no one listens on, for a port
// flag of the benchmarked program.
func FreeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}
