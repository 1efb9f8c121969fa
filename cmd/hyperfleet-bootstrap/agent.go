package main

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// agentStopGrace is how long the agent has to stop after SIGTERM before it
// is killed.
const agentStopGrace = 10 * time.Second

// agentProcess is the machine's spire-agent, a child of this process.
type agentProcess struct {
	cmd  *exec.Cmd
	out  *redactor
	done chan struct{}
	// err is cmd.Wait's, set before done closes.
	err error
}

// startAgent runs `spire-agent run -config conf` with its output on the
// console, token replaced. The token is in the agent's join_token_file,
// not its arguments or environment.
func startAgent(bin, conf, token string, console io.Writer) (*agentProcess, error) {
	out := newRedactor(console, token)
	cmd := exec.Command(bin, "run", "-config", conf) //nolint:gosec // the image's agent, with a configuration of our own
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a Ctrl-C on the console reaches the agent
	// through this process, which stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the SPIRE agent %s: %w", bin, err)
	}
	p := &agentProcess{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.flush()
		close(p.done)
	}()
	return p, nil
}

func (p *agentProcess) pid() int { return p.cmd.Process.Pid }

func (p *agentProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitErr is how the agent ended; only after done.
func (p *agentProcess) exitErr() error {
	if p.err == nil {
		return fmt.Errorf("status 0")
	}
	return p.err
}

func (p *agentProcess) lastLines() string { return p.out.last() }

// stop ends the agent: SIGTERM, and SIGKILL if it has not exited within
// agentStopGrace. Once it returns, nothing on the machine serves its SVIDs.
func (p *agentProcess) stop(log func(string, ...any)) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(agentStopGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		log("spire-agent did not stop within %s of SIGTERM; killing it", agentStopGrace)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	log("Stopped spire-agent (pid %d)", p.pid())
}

// redactor passes the agent's output to the console with the join token's
// value replaced: the agent logs its own ID,
// spiffe://<td>/spire/agent/join_token/<token>. It keeps the last lines
// for error messages.
type redactor struct {
	mu      sync.Mutex
	console io.Writer
	secret  []byte
	pending []byte
	lines   []string
}

const (
	keptLines = 20
	// flushAt: a line longer than this goes out in pieces rather than
	// growing the buffer without bound.
	flushAt = 64 << 10
)

func newRedactor(console io.Writer, secret string) *redactor {
	return &redactor{console: console, secret: []byte(secret)}
}

var redacted = []byte("<join token>")

func (r *redactor) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(r.pending, b...)
	if len(r.secret) > 0 {
		r.pending = bytes.ReplaceAll(r.pending, r.secret, redacted)
	}
	n := bytes.LastIndexByte(r.pending, '\n') + 1
	if len(r.pending)-n > flushAt {
		// After the replacement, a secret can start only in the last
		// len(secret)-1 bytes (it would otherwise be whole, and replaced):
		// everything before them may go out.
		n = len(r.pending) - max(len(r.secret)-1, 0)
	}
	r.emit(n)
	return len(b), nil
}

// flush writes what is left once the agent has exited.
func (r *redactor) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emit(len(r.pending))
}

func (r *redactor) emit(n int) {
	if n <= 0 {
		return
	}
	out := r.pending[:n]
	_, _ = r.console.Write(out)
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimRight(line, "\n"); line != "" {
			r.lines = append(r.lines, line)
		}
	}
	if len(r.lines) > keptLines {
		r.lines = append([]string(nil), r.lines[len(r.lines)-keptLines:]...)
	}
	r.pending = append(r.pending[:0], r.pending[n:]...)
}

func (r *redactor) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == 0 {
		return "  (nothing)"
	}
	return "  " + strings.Join(r.lines, "\n  ")
}
