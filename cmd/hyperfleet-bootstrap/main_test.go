package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// fakeRunnerTarball builds testdata/fakerunner and packs it as an actions
// runner release: config.sh and run.sh wrapping it, as the real tarball's
// scripts wrap Runner.Listener.
func fakeRunnerTarball(t *testing.T) []byte {
	t.Helper()
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("hyperfleet-fakerunner-%d", os.Getpid()))
	fakeRunnerBin = bin
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/fakerunner")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the fake runner: %v\n%s", err, out)
	}
	binData, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name string, mode int64, data []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	add("bin/fakerunner", 0o755, binData)
	add("config.sh", 0o755, []byte("#!/bin/sh\nexec \"$(dirname \"$0\")/bin/fakerunner\" config \"$@\"\n"))
	add("run.sh", 0o755, []byte("#!/bin/sh\nexec \"$(dirname \"$0\")/bin/fakerunner\" run \"$@\"\n"))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var (
	tarballOnce sync.Once
	tarball     []byte
	// fakeRunnerBin is the fake runner's binary, also run on its own as a job.
	fakeRunnerBin string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeRunnerBin != "" {
		_ = os.Remove(fakeRunnerBin)
	}
	os.Exit(code)
}

// lab is one simulated runner VM: dir is its filesystem's root (the agent's
// configuration under etc/hyperfleet, the runner under opt/actions-runner),
// and user the runner's account: nobody when the tests run as root, so the
// runner and its job really run unprivileged; else the tests' own user (the
// agent cannot switch users then, and says so in the test log).
type lab struct {
	sim      *githubsim.Server
	gh       *github.Client
	scope    github.Scope
	download *httptest.Server
	dir      string
	sum      string
	user     string
	uid, gid int
}

func newLab(t *testing.T) *lab {
	t.Helper()
	tarballOnce.Do(func() { tarball = fakeRunnerTarball(t) })
	sim := githubsim.New(githubsim.Options{Repositories: []string{"acme/widgets"}, JobDuration: 300 * time.Millisecond})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	gh, err := github.New(github.Config{BaseURL: sim.URL() + "/", Token: sim.PAT()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	// The release download, as github.com/actions/runner/releases serves it.
	download := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2.321.0/actions-runner-linux-x64-2.321.0.tar.gz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(tarball)
	}))
	t.Cleanup(download.Close)
	sum := sha256.Sum256(tarball)
	l := &lab{sim: sim, gh: gh, scope: github.Scope{Owner: "acme", Repository: "widgets"}, download: download,
		dir: t.TempDir(), sum: hex.EncodeToString(sum[:]), uid: os.Getuid(), gid: os.Getgid()}
	if l.uid == 0 {
		l.uid, l.gid = 65534, 65534
	} else {
		t.Logf("not root: the runner runs as the tests' own uid %d, so the search cannot show what a different uid hides", l.uid)
	}
	l.user = fmt.Sprintf("%d:%d", l.uid, l.gid)
	// t.TempDir's parent is 0700: open the way to the VM's root, as / is.
	for _, d := range []string{filepath.Dir(l.dir), l.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l *lab) config(t *testing.T, c Config) string {
	t.Helper()
	c.Runner = Runner{Version: "2.321.0", OS: "linux", Arch: "x64", SHA256: l.sum, User: l.user,
		DownloadURL: l.download.URL + "/v{version}/actions-runner-{os}-{arch}-{version}.tar.gz", InstallDir: filepath.Join(l.dir, "opt", "actions-runner")}
	c.PowerOffCommand = []string{"touch", filepath.Join(l.dir, "powered-off")}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	// As the user data's bootcmd and write_files leave it.
	path := filepath.Join(l.dir, "etc", "hyperfleet", "bootstrap.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// args runs the agent on the lab's configuration. The attestation file is
// the lab's too, which these tests never write: the agent must then behave
// as it did before attestation, and must not look at the host's /etc.
func (l *lab) args(path string) []string {
	return []string{"--config", path, "--attestation", filepath.Join(l.dir, "etc", "hyperfleet", "attestation.json")}
}

// configGone fails the test if the agent left its configuration behind.
func configGone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the configuration %s is still there after the agent read it (stat: %v)", path, err)
	}
}

func (l *lab) poweredOff() bool {
	_, err := os.Stat(filepath.Join(l.dir, "powered-off"))
	return err == nil
}

func noEnv(string) string { return "" }

// The whole agent with a registration token: download (checksum checked),
// config.sh --ephemeral, one job, power-off; the token never on the console.
func TestRegistrationTokenRunsOneJobAndPowersOff(t *testing.T) {
	l := newLab(t)
	tok, err := l.gh.RegistrationToken(context.Background(), l.scope)
	if err != nil {
		t.Fatal(err)
	}
	job, err := l.sim.QueueJob("acme/widgets", []string{"self-hosted", "linux", "x64", "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	path := l.config(t, Config{URL: l.gh.RunnerURL(l.scope), Token: tok.Value, Name: "pool-abcde", Labels: []string{"gpu"}})
	var console bytes.Buffer
	if code := run(l.args(path), &console, &console, noEnv); code != 0 {
		t.Fatalf("exit %d:\n%s", code, console.String())
	}
	j, _ := l.sim.Job(job)
	if j.Status != "completed" || j.RunnerName != "pool-abcde" {
		t.Errorf("job %+v", j)
	}
	if !l.poweredOff() {
		t.Error("the agent did not power off after the job")
	}
	if n := len(l.sim.Runners()); n != 0 {
		t.Errorf("%d runners still registered: the ephemeral runner should be gone", n)
	}
	out := console.String()
	for _, want := range []string{"Downloading the actions runner 2.321.0", "Registering runner pool-abcde", "finished its job", "Powering off"} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, tok.Value) {
		t.Fatal("the registration token was printed on the console")
	}
	configGone(t, path)
}

// A JIT config: no config.sh, run.sh --jitconfig.
func TestJITConfigRunsOneJob(t *testing.T) {
	l := newLab(t)
	jit, err := l.gh.GenerateJITConfig(context.Background(), l.scope, github.JITConfigRequest{Name: "pool-jit01", Labels: []string{"self-hosted", "linux", "x64"}})
	if err != nil {
		t.Fatal(err)
	}
	job, err := l.sim.QueueJob("acme/widgets", []string{"self-hosted"})
	if err != nil {
		t.Fatal(err)
	}
	path := l.config(t, Config{JITConfig: jit.Encoded, Name: "pool-jit01"})
	var console bytes.Buffer
	if code := run(l.args(path), &console, &console, noEnv); code != 0 {
		t.Fatalf("exit %d:\n%s", code, console.String())
	}
	if j, _ := l.sim.Job(job); j.Status != "completed" || j.RunnerName != "pool-jit01" {
		t.Errorf("job %+v", j)
	}
	if strings.Contains(console.String(), jit.Encoded) {
		t.Fatal("the JIT config was printed on the console")
	}
	configGone(t, path)
}

// A tampered download is refused; the agent still powers the VM off so
// the pool replaces it.
func TestChecksumMismatchIsRefused(t *testing.T) {
	l := newLab(t)
	l.sum = strings.Repeat("0", 64)
	path := l.config(t, Config{URL: l.gh.RunnerURL(l.scope), Token: "t", Name: "pool-bad"})
	var console bytes.Buffer
	if code := run(l.args(path), &console, &console, noEnv); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, console.String())
	}
	if !strings.Contains(console.String(), "SHA-256") || !l.poweredOff() {
		t.Errorf("want a checksum error and a power-off:\n%s", console.String())
	}
}

// The template's httpTimeout bounds the runner's download: a download
// server that never answers fails the agent within it, not in ten minutes.
func TestDownloadHonoursHTTPTimeout(t *testing.T) {
	l := newLab(t)
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(stall.Close)
	path := l.config(t, Config{URL: l.gh.RunnerURL(l.scope), Token: "t", Name: "pool-slow"})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	c.Runner.DownloadURL, c.Runner.HTTPTimeout = stall.URL+"/runner.tgz", "300ms"
	if data, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var console bytes.Buffer
	if code := run(l.args(path), &console, &console, noEnv); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, console.String())
	}
	if !strings.Contains(console.String(), "deadline exceeded") || !l.poweredOff() {
		t.Errorf("want the download to give up at its deadline, and a power-off:\n%s", console.String())
	}
}

func TestConfigErrorsAndEnvironmentFallbacks(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.json")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{"RUNNER_VERSION": "2.400.0", "RUNNER_DOWNLOAD_URL": "https://mirror.example/{version}/{os}-{arch}.tgz", "RUNNER_INSTALL_DIR": "/srv/runner"}
	c, err := loadConfig(write(`{"name":"n","token":"t","url":"https://github.com/acme/widgets"}`), func(k string) string { return env[k] }, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://mirror.example/2.400.0/" + runnerOS(runtime.GOOS) + "-" + runnerArch(runtime.GOARCH) + ".tgz"; c.Runner.ExpandedDownloadURL() != want {
		t.Errorf("download URL %q", c.Runner.ExpandedDownloadURL())
	}
	if c.Runner.InstallDir != "/srv/runner" || !c.PowersOff() || c.PowerOffCommand[0] != "poweroff" || c.Runner.User != "runner" {
		t.Errorf("defaults: %+v", c)
	}
	for body, want := range map[string]string{
		`{"name":"n"}`: "token (a registration token) or jitConfig is required",
		`{"name":"n","token":"t","jitConfig":"j","url":"u"}`: "mutually exclusive",
		`{"token":"t"}`:                     "name is required",
		`{"name":"n","token":"t","nmea":1}`: "unknown field",
		`{"name":"n","token":"t","url":"u","runner":{"httpTimeout":"soon"}}`: "runner.httpTimeout",
	} {
		if _, err := loadConfig(write(body), noEnv, false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", body, err, want)
		}
	}
}

func TestUntarRefusesEscapes(t *testing.T) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	_ = tw.WriteHeader(&tar.Header{Name: "../../etc/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	_ = gz.Close()
	p := filepath.Join(t.TempDir(), "evil.tar.gz")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// "../../etc/evil" is cleaned to stay inside dir; nothing lands outside.
	if err := untar(p, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc", "evil")); err != nil {
		t.Errorf("the entry should land inside the install dir: %v", err)
	}
}
