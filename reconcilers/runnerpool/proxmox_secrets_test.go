package runnerpool_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim/runnersimtest"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
)

// processAgents maps a test's namespace to how its VMs run the real agent
// (guestProcess); namespaces without one get the in-process stand-in.
var processAgents sync.Map

func guestProcess(claim *hypervisorv1alpha1.MachineClaim) *runnersim.Process {
	v, ok := processAgents.Load(claim.Namespace)
	if !ok {
		return nil
	}
	return v.(func(*hypervisorv1alpha1.MachineClaim) *runnersim.Process)(claim)
}

// End to end on Proxmox, with the real agent: the pool makes a runner with
// a JIT config, the VM boots with it on its NoCloud ISO, the agent (a real
// process) takes its configuration from where cloud-init wrote it, runs the
// runner as an unprivileged user, and a job inside the runner searches the
// VM's files and every process's command line and environment for the JIT
// config: it finds nothing, and the job completes.
func TestProxmoxJobInsideTheRunnerFindsNoCredential(t *testing.T) {
	l := newProxmoxLab(t)
	agent, fakeRunner := runnersimtest.BuildAgent(t)
	base := t.TempDir()
	outs := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base, filepath.Dir(outs), outs} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65534, 65534
	} else {
		t.Logf("not root: the runner runs as the tests' own uid %d", uid)
	}
	type vm struct {
		root, out, jit string
		console        *runnersimtest.Console
	}
	var (
		mu  sync.Mutex
		vms = map[string]*vm{}
	)
	processAgents.Store(l.ns, func(c *hypervisorv1alpha1.MachineClaim) *runnersim.Process {
		// The credential the VM booted with, to search for afterwards.
		ud, err := guestUserData(rootCtx, c)
		if err != nil {
			t.Errorf("claim %s: %v", c.Name, err)
			return nil
		}
		cfg, err := runnerconfig.ParseUserData(ud)
		if err != nil {
			t.Errorf("claim %s: %v", c.Name, err)
			return nil
		}
		root, install := runnersimtest.VMRoot(t, base, c.Name, fakeRunner)
		v := &vm{root: root, out: filepath.Join(outs, c.Name), jit: cfg.JITConfig, console: &runnersimtest.Console{}}
		mu.Lock()
		vms[c.Name] = v
		mu.Unlock()
		return &runnersim.Process{
			Agent: agent, Root: root, Console: v.console,
			Runner: runnerconfig.Runner{InstallDir: install, User: fmt.Sprintf("%d:%d", uid, gid)},
			Env:    append(os.Environ(), "FAKERUNNER_JOB_OUTPUT="+v.out, "FAKERUNNER_VM_ROOT="+root),
		}
	})
	t.Cleanup(func() { processAgents.Delete(l.ns) })
	l.pool("searched", func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.MaxReplicas = 1 })
	id, err := gh.QueueJob(repo, []string{"self-hosted", "searched"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 2*time.Minute, func() (bool, string) { return jobDone(id) })
	j, _ := gh.Job(id)
	l.gone("searched")
	mu.Lock()
	v := vms[j.RunnerName]
	mu.Unlock()
	if v == nil {
		t.Fatalf("the job ran on %q, which no agent process served", j.RunnerName)
	}
	if v.jit == "" {
		t.Fatal("the runner's user data carried no JIT config")
	}
	data, err := os.ReadFile(v.out)
	if err != nil {
		t.Fatalf("the job inside the runner wrote nothing: %v\nagent console:\n%s", err, v.console.String())
	}
	seen := string(data)
	if want := fmt.Sprintf("uid %d\n", uid); !strings.HasPrefix(seen, want) {
		t.Errorf("the job ran as %q, want %q", strings.SplitN(seen, "\n", 2)[0], want)
	}
	if !regexp.MustCompile(`(?m)^file .*/opt/actions-runner/\.runner$`).MatchString(seen) ||
		!regexp.MustCompile(`(?m)^proc \d+ environ$`).MatchString(seen) {
		t.Fatalf("the job's search read neither the runner's files nor any environment:\n%.2000s", seen)
	}
	if strings.Contains(seen, v.jit) {
		t.Error("a job inside the runner found its JIT config")
	}
	if strings.Contains(v.console.String(), v.jit) {
		t.Error("the agent printed the JIT config on the console")
	}
	if _, err := os.Stat(filepath.Join(v.root, "etc", "hyperfleet", "bootstrap.json")); !os.IsNotExist(err) {
		t.Errorf("the agent left its configuration behind (stat: %v)", err)
	}
}
