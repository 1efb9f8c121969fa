package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// leaseName is the operator's default --leader-election-id.
const leaseName = "hyperfleet-leader"

// controllers are the reconcilers MachineClaims need; the others would
// only add load to a shared 2-core machine.
const controllers = "hypervisorcluster,hypervisormachinetemplate,machineclaim,orphans"

// replica is one incarnation of one of the two operator processes. Each
// incarnation has its own identity (slot and restart count), so a Lease
// held by a killed process is never mistaken for its successor's: the
// successor must win the Lease like any candidate.
type replica struct {
	identity string
	cmd      *exec.Cmd
	// exited is closed when the process has ended.
	exited chan struct{}
	// workers is closed when the process's machineclaim controller starts
	// its workers: it holds the Lease and reconciles from then on.
	workers     chan struct{}
	workersOnce sync.Once
	workersAt   time.Time
}

// operators runs and supervises the two replicas: whenever one ends,
// killed or not, the next incarnation of its slot starts, so there are
// always two.
type operators struct {
	bin, kubeconfig, logDir string
	cfg                     config
	c                       client.Client

	mu       sync.Mutex
	stopping bool
	slots    map[string]*replica
	byID     map[string]*replica
	restarts map[string]int
	// unexpected counts exits the harness did not cause (a replica that
	// lost its Lease exits, as controller-runtime managers do).
	unexpected []string
	wg         sync.WaitGroup
}

func startOperators(b *testing.B, e *env, bin string, cfg config) *operators {
	b.Helper()
	o := &operators{bin: bin, kubeconfig: e.kubeconfig, logDir: filepath.Join(e.dir, "logs"), cfg: cfg, c: e.c,
		slots: map[string]*replica{}, byID: map[string]*replica{}, restarts: map[string]int{}}
	if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, slot := range []string{"a", "b"} {
		if err := o.start(slot); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(o.stop)
	return o
}

func (o *operators) args() []string {
	return []string{"run",
		"--kubeconfig", o.kubeconfig,
		"--leader-elect=true", "--leader-election-namespace", operatorNamespace,
		"--leader-election-lease-duration", o.cfg.leaseDuration.String(),
		"--leader-election-renew-deadline", o.cfg.renewDeadline.String(),
		"--leader-election-retry-period", o.cfg.retryPeriod.String(),
		"--operator-namespace", operatorNamespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--controllers", controllers,
		"--orphan-grace", o.cfg.orphanGrace.String(), "--orphan-sweep-interval", o.cfg.sweepInterval.String(),
		"--machine-observe-interval", "10s",
	}
}

// start runs the next incarnation of slot.
func (o *operators) start(slot string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopping {
		return nil
	}
	o.restarts[slot]++
	id := fmt.Sprintf("chaos-%s-%d", slot, o.restarts[slot])
	logf, err := os.Create(filepath.Join(o.logDir, id+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(o.bin, o.args()...)
	cmd.Env = append(os.Environ(), "POD_NAME="+id)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = logf.Close()
		return err
	}
	cmd.Stdout = logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("starting %s: %w", id, err)
	}
	r := &replica{identity: id, cmd: cmd, exited: make(chan struct{}), workers: make(chan struct{})}
	o.slots[slot], o.byID[id] = r, r
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		r.watchLog(stderr, logf)
		err := cmd.Wait()
		_ = logf.Close()
		close(r.exited)
		o.ended(slot, r, err)
	}()
	return nil
}

// watchLog copies the process's log to its file and notes when the
// machineclaim controller starts its workers.
func (r *replica) watchLog(from io.Reader, to io.Writer) {
	sc := bufio.NewScanner(from)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		_, _ = fmt.Fprintln(to, line)
		if strings.Contains(line, "Starting workers") && strings.Contains(line, `"controller":"machineclaim"`) {
			r.workersOnce.Do(func() {
				r.workersAt = time.Now()
				close(r.workers)
			})
		}
	}
	_, _ = io.Copy(io.Discard, from)
}

// ended restarts the slot, and records an exit the harness did not cause.
func (o *operators) ended(slot string, r *replica, err error) {
	killed := false
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			killed = true
		}
	}
	o.mu.Lock()
	stopping := o.stopping
	if !killed && !stopping {
		o.unexpected = append(o.unexpected, fmt.Sprintf("%s: %v (log %s)", r.identity, err, filepath.Join(o.logDir, r.identity+".log")))
	}
	o.mu.Unlock()
	if !stopping {
		if err := o.start(slot); err != nil {
			o.mu.Lock()
			o.unexpected = append(o.unexpected, fmt.Sprintf("restarting slot %s: %v", slot, err))
			o.mu.Unlock()
		}
	}
}

// kill SIGKILLs the replica holding identity; the supervisor restarts its slot.
func (o *operators) kill(identity string) (*replica, error) {
	o.mu.Lock()
	r := o.byID[identity]
	o.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("no replica %q", identity)
	}
	if err := r.cmd.Process.Kill(); err != nil {
		return nil, fmt.Errorf("killing %s: %w", identity, err)
	}
	<-r.exited
	return r, nil
}

// replica returns the incarnation called identity, nil if none.
func (o *operators) replica(identity string) *replica {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byID[identity]
}

// unexpectedExits is a copy of the exits the harness did not cause.
func (o *operators) unexpectedExits() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.unexpected...)
}

// starts is how many processes ran in all.
func (o *operators) starts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.byID)
}

// stop ends both replicas for good (SIGTERM, so they release nothing
// half-done; SIGKILL after a bound) and waits for them.
func (o *operators) stop() {
	o.mu.Lock()
	o.stopping = true
	live := make([]*replica, 0, len(o.slots))
	for _, r := range o.slots {
		live = append(live, r)
	}
	o.mu.Unlock()
	for _, r := range live {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(15 * time.Second):
			_ = r.cmd.Process.Kill()
		}
	}
	o.wg.Wait()
}

// holder reads the Lease's holder; "" when there is none yet.
func (o *operators) holder(ctx context.Context) (string, error) {
	l := &coordinationv1.Lease{}
	if err := o.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: leaseName}, l); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}
