package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one cluster component running as a child process, its output
// in a log file so a failure can show its last lines.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProcess(name, binary, logDir string, args ...string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	out, err := os.Create(logPath) //nolint:gosec // a file in the cluster's own temporary directory
	if err != nil {
		return nil, err
	}
	// Not CommandContext: the component lives until Stop, not until the
	// context that started the cluster ends.
	cmd := exec.Command(binary, args...) //nolint:gosec // the binaries hack/controlplane.sh built
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so a Ctrl-C on `go test` reaches us first and
	// we stop it in order; and killed with us, so a test binary killed on
	// its timeout leaves no component behind (still holding, say, a lock
	// file descriptor it inherited).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports an error when the process has ended, with its last lines.
func (p *process) exited() error {
	select {
	case <-p.done:
		err := p.err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Errorf("%s exited (%w):\n%s", p.name, err, p.tail(20))
	default:
		return nil
	}
}

// tail returns the last n lines of the process's log.
func (p *process) tail(n int) string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// stop asks the process to end and kills it if it has not within the grace period.
func (p *process) stop(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	grace, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case <-p.done:
		return nil
	case <-grace.Done():
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New(p.name + " did not stop on SIGTERM within 10s; killed")
	}
}
