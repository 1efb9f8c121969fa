package runnerpool

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// The user data makes the configuration's directory root-only before it
// writes the file (bootcmd runs before write_files), writes the file 0600,
// and carries the configuration back intact for the stand-ins of the VM.
func TestUserDataProtectsTheConfiguration(t *testing.T) {
	cfg := BootstrapConfig{Name: "pool-abcde", JITConfig: "eyJqaXQiOiJ4In0=", Runner: RunnerSettings{User: "runner"}}
	ud, err := userData(cfg, "/usr/local/bin/hyperfleet-bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	boot, write := strings.Index(ud, "bootcmd:\n  - [install, -d, -m, \"0700\", /etc/hyperfleet]\n"), strings.Index(ud, "write_files:\n")
	if boot < 0 || write < 0 || boot > write {
		t.Fatalf("want bootcmd making /etc/hyperfleet 0700 before write_files:\n%s", ud)
	}
	if !strings.Contains(ud, "permissions: \"0600\"") {
		t.Errorf("the configuration is not written 0600:\n%s", ud)
	}
	back, err := ParseUserData(ud)
	if err != nil {
		t.Fatal(err)
	}
	if back.Name != cfg.Name || back.JITConfig != cfg.JITConfig || back.Runner.User != "runner" {
		t.Errorf("parsed back %+v", back)
	}
}

// TestRunnerSettingsFromTheTemplate: every field of the template's
// spec.workload.githubRunner reaches the agent's configuration in place of
// the operator's flag, and what the template leaves unset keeps the flag.
func TestRunnerSettingsFromTheTemplate(t *testing.T) {
	operator := RunnerSettings{Version: "2.300.0", DownloadURL: "https://mirror/{version}", InstallDir: "/opt/runner", User: "ci", SHA256: "abc"}
	if got := runnerSettings(operator, nil); got != operator {
		t.Fatalf("without a workload: %+v, want the operator's %+v", got, operator)
	}
	w := &hypervisorv1alpha1.WorkloadConfig{Type: hypervisorv1alpha1.WorkloadGitHubRunner, GitHubRunner: &hypervisorv1alpha1.GitHubRunnerWorkload{
		RunnerVersion: "2.321.0", OS: "linux", Arch: "arm64", WorkDir: "/srv/runner", ConfigScript: "cfg.sh", RunScript: "go.sh",
		HTTPTimeout: &metav1.Duration{Duration: 45 * time.Second},
	}}
	want := RunnerSettings{Version: "2.321.0", DownloadURL: "https://mirror/{version}", InstallDir: "/srv/runner", User: "ci", SHA256: "abc",
		OS: "linux", Arch: "arm64", ConfigScript: "cfg.sh", RunScript: "go.sh", HTTPTimeout: "45s"}
	if got := runnerSettings(operator, w); got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	ud, err := userData(BootstrapConfig{Name: "p-1", JITConfig: "x", Runner: want}, "/a")
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseUserData(ud)
	if err != nil || back.Runner != want {
		t.Fatalf("the agent reads %+v (%v), want %+v", back.Runner, err, want)
	}
}
