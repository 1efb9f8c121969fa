package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// jobOutput is where the fake runner's job writes what it saw: a directory
// outside the VM's root, writable by the runner's user.
func (l *lab) jobOutput(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "seen")
}

// seen reads what the job saw, and checks the search really looked: its
// uid, the runner's own settings file, and processes' environments.
func (l *lab) seen(t *testing.T, out string) string {
	t.Helper()
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the job wrote nothing: %v", err)
	}
	text := string(data)
	if want := fmt.Sprintf("uid %d\n", l.uid); !strings.HasPrefix(text, want) {
		t.Errorf("the job ran as %q, want the runner's unprivileged %q", strings.SplitN(text, "\n", 2)[0], want)
	}
	if !regexp.MustCompile(`(?m)^file .*/opt/actions-runner/\.runner$`).MatchString(text) {
		t.Error("the job could not read the runner's .runner: the search is not looking where the runner keeps its files")
	}
	if !regexp.MustCompile(`(?m)^proc \d+ environ$`).MatchString(text) {
		t.Error("the job read no process's environment: the search is not looking at /proc")
	}
	return text
}

// A workflow job, running inside the runner as its user, searches the VM's
// filesystem and every process's command line and environment for the
// runner's credential, and finds neither the registration token nor the
// JIT config. The agent, the scripts and the fake runner are real
// processes; the VM's filesystem is the lab's directory.
func TestAJobFindsNoCredential(t *testing.T) {
	for _, method := range []string{"RegistrationToken", "JITConfig"} {
		t.Run(method, func(t *testing.T) {
			l := newLab(t)
			ctx := context.Background()
			name := "pool-" + strings.ToLower(method[:3])
			cfg := Config{Name: name}
			var secret string
			if method == "JITConfig" {
				jit, err := l.gh.GenerateJITConfig(ctx, l.scope, github.JITConfigRequest{Name: name, Labels: []string{"self-hosted", "linux", "x64"}})
				if err != nil {
					t.Fatal(err)
				}
				cfg.JITConfig, secret = jit.Encoded, jit.Encoded
			} else {
				tok, err := l.gh.RegistrationToken(ctx, l.scope)
				if err != nil {
					t.Fatal(err)
				}
				cfg.URL, cfg.Token, secret = l.gh.RunnerURL(l.scope), tok.Value, tok.Value
			}
			job, err := l.sim.QueueJob("acme/widgets", []string{"self-hosted"})
			if err != nil {
				t.Fatal(err)
			}
			out := l.jobOutput(t)
			t.Setenv("FAKERUNNER_JOB_OUTPUT", out)
			t.Setenv("FAKERUNNER_VM_ROOT", l.dir)
			path := l.config(t, cfg)
			var console bytes.Buffer
			if code := run(l.args(path), &console, &console, noEnv); code != 0 {
				t.Fatalf("exit %d:\n%s", code, console.String())
			}
			if j, _ := l.sim.Job(job); j.Status != "completed" || j.RunnerName != name {
				t.Fatalf("job %+v", j)
			}
			text := l.seen(t, out)
			if strings.Contains(text, secret) {
				before := text[:strings.Index(text, secret)]
				where := before[max(strings.LastIndex(before, "\nfile "), strings.LastIndex(before, "\nproc "))+1:]
				where, _, _ = strings.Cut(where, "\n")
				t.Fatalf("the job found the %s in %s", method, where)
			}
			if strings.Contains(console.String(), secret) {
				t.Fatalf("the %s was printed on the console", method)
			}
			configGone(t, path)
		})
	}
}

// The search finds a credential where the old agent left one: in a file
// the runner's user can read, on a command line (config.sh --token) and in
// an environment (run.sh's ACTIONS_RUNNER_INPUT_JITCONFIG). Without this, a
// search that looked nowhere would pass the test above.
func TestTheJobSearchFindsAPlantedCredential(t *testing.T) {
	l := newLab(t)
	tarballOnce.Do(func() { tarball = fakeRunnerTarball(t) })
	planted := "planted-" + strings.Repeat("x", 8) + fmt.Sprint(os.Getpid())
	file := filepath.Join(l.dir, "etc", "bootstrap.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`{"token":"`+planted+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	asRunner := func(cmd *exec.Cmd) {
		if os.Getuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(l.uid), Gid: uint32(l.gid), Groups: []uint32{}}}
		}
	}
	// A listener with the credential on its command line and environment.
	holder := exec.Command("sh", "-c", "sleep 60; exit 0", "config.sh", "--token", planted)
	holder.Env = append(os.Environ(), "ACTIONS_RUNNER_INPUT_JITCONFIG="+planted)
	asRunner(holder)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	out := l.jobOutput(t)
	job := exec.Command(fakeRunnerBin, "job")
	job.Env = append(os.Environ(), "FAKERUNNER_VM_ROOT="+l.dir, "FAKERUNNER_JOB_OUTPUT="+out)
	asRunner(job)
	if b, err := job.CombinedOutput(); err != nil {
		t.Fatalf("the job: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	pid := fmt.Sprint(holder.Process.Pid)
	for _, where := range []string{"file " + file, "proc " + pid + " cmdline", "proc " + pid + " environ"} {
		i := strings.Index(text, where+"\n")
		if i < 0 {
			t.Errorf("the job did not read %s", where)
			continue
		}
		body, _, _ := strings.Cut(text[i+len(where)+1:], "\n")
		if !strings.Contains(body, planted) {
			t.Errorf("the job read %s but did not find the planted credential in it", where)
		}
	}
}
