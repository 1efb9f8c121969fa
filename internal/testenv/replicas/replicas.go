// Package replicas runs operator processes for failover tests the way a
// Deployment runs its Pods: each slot always has one live process, and
// when one ends the next incarnation of its slot starts at once under a new
// identity (<prefix>-<slot>-<n>), so a Lease a dead process held is never
// mistaken for its successor's: the successor must win it like any
// candidate.
//
// internal/chaos and internal/demandfailover both use it; what differs
// between them (the flags, the log line that says the process reconciles)
// comes in through Spec.
package replicas

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
const stopGrace = 20 * time.Second

// Spec says how to run one process.
type Spec struct {
	// Prefix starts every identity.
	Prefix string
	// LogDir receives one log file per incarnation, <identity>.log.
	LogDir string
	// Command builds the process of an incarnation; POD_NAME=identity is
	// added to its environment, as the Downward API gives a Pod its name.
	Command func(slot, identity string) *exec.Cmd
	// Ready, if set, says whether a log line shows the process at work
	// (for example its controller's "Starting workers"); the first such
	// line closes Replica.Ready.
	Ready func(line string) bool
}

// Replica is one incarnation of one slot.
type Replica struct {
	Identity, Slot, Log string
	cmd                 *exec.Cmd
	// Exited is closed when the process has ended.
	Exited chan struct{}
	// Ready is closed at the first log line Spec.Ready accepts; ReadyAt is
	// when, valid once Ready is closed.
	Ready     chan struct{}
	ReadyAt   time.Time
	readyOnce sync.Once
}

// Set supervises the slots.
type Set struct {
	spec Spec

	mu       sync.Mutex
	stopping bool
	slots    map[string]*Replica
	byID     map[string]*Replica
	restarts map[string]int
	killed   map[string]bool
	// unexpected lists exits the harness did not cause (a replica that lost
	// its Lease exits, as controller-runtime managers do).
	unexpected []string
	wg         sync.WaitGroup
}

// Start runs one process per slot and stops them all when the test ends.
func Start(tb testing.TB, spec Spec, slots ...string) *Set {
	tb.Helper()
	if err := os.MkdirAll(spec.LogDir, 0o750); err != nil {
		tb.Fatal(err)
	}
	s := &Set{spec: spec, slots: map[string]*Replica{}, byID: map[string]*Replica{}, restarts: map[string]int{}, killed: map[string]bool{}}
	tb.Cleanup(s.Stop)
	for _, slot := range slots {
		if err := s.start(slot); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// start runs the next incarnation of slot.
func (s *Set) start(slot string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil
	}
	s.restarts[slot]++
	id := fmt.Sprintf("%s-%s-%d", s.spec.Prefix, slot, s.restarts[slot])
	r := &Replica{Identity: id, Slot: slot, Log: filepath.Join(s.spec.LogDir, id+".log"),
		Exited: make(chan struct{}), Ready: make(chan struct{})}
	logf, err := os.Create(r.Log)
	if err != nil {
		return err
	}
	cmd := s.spec.Command(slot, id)
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, "POD_NAME="+id)
	cmd.Stdout = logf
	stderr, err := cmd.StderrPipe()
	if err != nil {
		_ = logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("starting %s: %w", id, err)
	}
	r.cmd = cmd
	s.slots[slot], s.byID[id] = r, r
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r.copyLog(stderr, logf, s.spec.Ready)
		err := cmd.Wait()
		_ = logf.Close()
		close(r.Exited)
		s.ended(r, err)
	}()
	return nil
}

// copyLog copies the process's log to its file, watching for Ready.
func (r *Replica) copyLog(from io.Reader, to io.Writer, ready func(string) bool) {
	sc := bufio.NewScanner(from)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		_, _ = fmt.Fprintln(to, line)
		if ready != nil && ready(line) {
			r.readyOnce.Do(func() {
				r.ReadyAt = time.Now()
				close(r.Ready)
			})
		}
	}
	_, _ = io.Copy(io.Discard, from)
}

// ended restarts the slot, and records an exit the harness did not cause.
func (s *Set) ended(r *Replica, err error) {
	s.mu.Lock()
	stopping, killed := s.stopping, s.killed[r.Identity]
	if !killed && !stopping {
		s.unexpected = append(s.unexpected, fmt.Sprintf("%s: %v (log %s)", r.Identity, err, r.Log))
	}
	s.mu.Unlock()
	if stopping {
		return
	}
	if err := s.start(r.Slot); err != nil {
		s.mu.Lock()
		s.unexpected = append(s.unexpected, fmt.Sprintf("restarting slot %s: %v", r.Slot, err))
		s.mu.Unlock()
	}
}

// Kill SIGKILLs the process called identity and waits until it has ended;
// its slot's next incarnation is then starting.
func (s *Set) Kill(identity string) (*Replica, error) {
	s.mu.Lock()
	r := s.byID[identity]
	if r != nil {
		s.killed[identity] = true
	}
	s.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("no replica %q", identity)
	}
	if err := r.cmd.Process.Kill(); err != nil {
		return nil, fmt.Errorf("killing %s: %w", identity, err)
	}
	<-r.Exited
	return r, nil
}

// Replica returns the incarnation called identity, nil if none.
func (s *Set) Replica(identity string) *Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[identity]
}

// UnexpectedExits is a copy of the exits the harness did not cause.
func (s *Set) UnexpectedExits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unexpected...)
}

// Starts is how many processes ran in all.
func (s *Set) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// Stop ends every slot for good (SIGTERM, so they release nothing
// half-done; SIGKILL after a bound) and waits for them. It may be called
// more than once.
func (s *Set) Stop() {
	s.mu.Lock()
	s.stopping = true
	live := make([]*Replica, 0, len(s.slots))
	for _, r := range s.slots {
		live = append(live, r)
	}
	s.mu.Unlock()
	for _, r := range live {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.Exited:
		case <-time.After(stopGrace):
			_ = r.cmd.Process.Kill()
		}
	}
	s.wg.Wait()
}

// LeaseHolder reads the holder of the Lease namespace/name; "" when there
// is none yet.
func LeaseHolder(ctx context.Context, c client.Reader, namespace, name string) (string, error) {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, l); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}
