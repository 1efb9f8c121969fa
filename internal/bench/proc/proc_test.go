package proc

import (
	"fmt"
	"os"
	"os/exec"
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
