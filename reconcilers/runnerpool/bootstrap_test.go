package runnerpool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
)

// TestRunnerSettingsFromTheTemplate: every field of the template's
// spec.workload.githubRunner reaches the agent's configuration in place of
// the operator's flag, and what the template leaves unset keeps the flag.
func TestRunnerSettingsFromTheTemplate(t *testing.T) {
	operator := runnerconfig.Runner{Version: "2.300.0", DownloadURL: "https://mirror/{version}", InstallDir: "/opt/runner", User: "ci", SHA256: "abc"}
	if got := runnerSettings(operator, nil); got != operator {
		t.Fatalf("without a workload: %+v, want the operator's %+v", got, operator)
	}
	w := &hypervisorv1alpha1.WorkloadConfig{Type: hypervisorv1alpha1.WorkloadGitHubRunner, GitHubRunner: &hypervisorv1alpha1.GitHubRunnerWorkload{
		RunnerVersion: "2.321.0", OS: "linux", Arch: "arm64", WorkDir: "/srv/runner", ConfigScript: "cfg.sh", RunScript: "go.sh",
		HTTPTimeout: &metav1.Duration{Duration: 45 * time.Second},
	}}
	want := runnerconfig.Runner{Version: "2.321.0", DownloadURL: "https://mirror/{version}", InstallDir: "/srv/runner", User: "ci", SHA256: "abc",
		OS: "linux", Arch: "arm64", ConfigScript: "cfg.sh", RunScript: "go.sh", HTTPTimeout: "45s"}
	if got := runnerSettings(operator, w); got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	ud, err := runnerconfig.UserData(runnerconfig.Config{Name: "p-1", JITConfig: "x", Runner: want}, "/a")
	if err != nil {
		t.Fatal(err)
	}
	back, err := runnerconfig.ParseUserData(ud)
	if err != nil || back.Runner != want {
		t.Fatalf("the agent reads %+v (%v), want %+v", back.Runner, err, want)
	}
}
