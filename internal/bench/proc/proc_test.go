package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// childMiB is what the child process holds resident.
const childMiB = 64

// TestMain doubles as the child: with PROC_TEST_CHILD set, the test binary
// touches childMiB MiB, says so, and spins until it is stopped.
func TestMain(m *testing.M) {
	if os.Getenv("PROC_TEST_CHILD") != "" {
		held := make([]byte, childMiB<<20)
		for i := range held {
			held[i] = 1
		}
		fmt.Fprintln(os.Stderr, "holding", len(held))
		for n := 0; ; n++ {
			held[n%len(held)]++
		}
	}
	os.Exit(m.Run())
}

// The readings are the child's own: its resident set and peak hold what it
// touched, its CPU time grows while it spins, its log is kept, and
// Exited reports its end with that log.
func TestReadsTheProcess(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROC_TEST_CHILD=1")
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.Log(), "holding") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(p.Log(), "holding") {
		t.Fatalf("log %q lacks what the child wrote", p.Log())
	}
	if err := p.Exited(); err != nil {
		t.Fatalf("a running child is reported exited: %v", err)
	}
	rss, err := p.RSS()
	if err != nil || rss < childMiB<<20 {
		t.Errorf("RSS %d MiB (%v), want at least the %d MiB the child touched", rss>>20, err, childMiB)
	}
	cpu1, err := p.CPU()
	if err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline) {
		if cpu2, _ := p.CPU(); cpu2 > cpu1 && p.PeakRSS() >= childMiB<<20 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cpu2, _ := p.CPU(); cpu2 <= cpu1 {
		t.Errorf("CPU time stayed %v while the child spun", cpu1)
	}
	if p.PeakRSS() < childMiB<<20 {
		t.Errorf("peak %d MiB, want at least %d", p.PeakRSS()>>20, childMiB)
	}
	p.Stop()
	if err := p.Exited(); err == nil || !strings.Contains(err.Error(), "holding") {
		t.Errorf("after Stop, Exited = %v; want an error with the log", err)
	}
	p.Stop() // a second Stop does nothing
}

// A machine snapshot around a spinning child finds the cores busy and the
// child's command among the processes that used them.
func TestMachineSeesWhereTheCPUWent(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROC_TEST_CHILD=1")
	before, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	time.Sleep(time.Second)
	after, err := ReadMachine()
	if err != nil {
		t.Fatal(err)
	}
	u := after.Since(before)
	name := filepath.Base(os.Args[0])
	if len(name) > 15 { // the kernel keeps the first 15 bytes of a command name
		name = name[:15]
	}
	var spent time.Duration
	for _, c := range u.ByCommand {
		if c.Command == name {
			spent = c.CPU
		}
	}
	if spent < 300*time.Millisecond {
		t.Errorf("%s used %v in a second of spinning; usage %s", name, spent, u)
	}
	if u.Busy <= 0 || u.Busy > 1 || u.Wall < time.Second {
		t.Errorf("busy %.2f over %v; want a share in (0, 1] over at least a second", u.Busy, u.Wall)
	}
	if !strings.Contains(u.String(), name) {
		t.Errorf("%q does not name %s", u.String(), name)
	}
}

// Usage is counted by pid and reported by command: a kernel worker whose
// name changed with its work is not counted twice, a process started in
// between counts whole, and kernel threads are summed by kind.
func TestUsageCountsByPid(t *testing.T) {
	s := time.Second
	before := Machine{at: time.Unix(0, 0), busy: 10 * s, idle: 10 * s, byPid: map[int]pidCPU{
		1: {command: "kube-apiserver", cpu: 5 * s},
		2: {command: command("kworker/1:0-events_power_efficient"), cpu: 9 * s},
		3: {command: "etcd", cpu: 1 * s},
	}}
	after := Machine{at: time.Unix(4, 0), busy: 16 * s, idle: 12 * s, steal: 0, byPid: map[int]pidCPU{
		1: {command: "kube-apiserver", cpu: 8 * s},
		2: {command: command("kworker/1:0-mm_percpu_wq"), cpu: 9*s + 500*time.Millisecond},
		3: {command: "etcd", cpu: 1 * s},
		4: {command: command("kworker/0:2-ext4"), cpu: 700 * time.Millisecond},
	}}
	u := after.Since(before)
	want := []CommandCPU{{"kube-apiserver", 3 * s}, {"kworker", 1200 * time.Millisecond}}
	if fmt.Sprint(u.ByCommand) != fmt.Sprint(want) {
		t.Errorf("by command %v, want %v", u.ByCommand, want)
	}
	if u.Busy != 0.75 || u.Wall != 4*s {
		t.Errorf("busy %.2f over %v, want 0.75 over 4s", u.Busy, u.Wall)
	}
	if got := u.String(); got != "cores 75% busy (steal 0%) over 4.0 s; by process: kube-apiserver 3.0 s, kworker 1.2 s" {
		t.Errorf("String() = %q", got)
	}
}

// A process the test did not start through Start is found by an argument
// only it has, and its CPU time read.
func TestPidWithArg(t *testing.T) {
	marker := fmt.Sprintf("proc-test-marker-%d", time.Now().UnixNano())
	cmd := exec.Command("sh", "-c", "while :; do :; done", marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid, err := PidWithArg(marker)
	if err != nil || pid != cmd.Process.Pid {
		t.Fatalf("PidWithArg = %d, %v; want %d", pid, err, cmd.Process.Pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cpu, err := CPUOf(pid)
		if err != nil {
			t.Fatal(err)
		}
		if cpu > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPUOf = %v after 10 s of spinning", cpu)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := PidWithArg(marker + "-absent"); err == nil {
		t.Error("PidWithArg found a process for an argument none has")
	}
}
