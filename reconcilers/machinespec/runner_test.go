package machinespec_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
)

// TestRunnerSettingsFromTheTemplate: every field of the template's
// spec.workload.githubRunner reaches the agent's configuration in place of
// the operator's flag, and what the template leaves unset keeps the flag.
func TestRunnerSettingsFromTheTemplate(t *testing.T) {
	operator := runnerconfig.Runner{Version: "2.300.0", DownloadURL: "https://mirror/{version}", InstallDir: "/opt/runner", User: "ci", SHA256: "abc"}
	if got := machinespec.RunnerSettings(operator, nil); got != operator {
		t.Fatalf("without a workload: %+v, want the operator's %+v", got, operator)
	}
	w := &hypervisorv1alpha1.WorkloadConfig{Type: hypervisorv1alpha1.WorkloadGitHubRunner, GitHubRunner: &hypervisorv1alpha1.GitHubRunnerWorkload{
		RunnerVersion: "2.321.0", OS: "linux", Arch: "arm64", WorkDir: "/srv/runner", ConfigScript: "cfg.sh", RunScript: "go.sh",
		HTTPTimeout: &metav1.Duration{Duration: 45 * time.Second},
	}}
	want := runnerconfig.Runner{Version: "2.321.0", DownloadURL: "https://mirror/{version}", InstallDir: "/srv/runner", User: "ci", SHA256: "abc",
		OS: "linux", Arch: "arm64", ConfigScript: "cfg.sh", RunScript: "go.sh", HTTPTimeout: "45s"}
	if got := machinespec.RunnerSettings(operator, w); got != want {
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

// TestRunnerUserDataHoldsNoRunner: a claim of a runner template that
// attests boots with the agent and the runner to install, and nothing of
// a runner (no JIT config, no token, no labels): the same user data serves
// a runner's machine and a standby machine. Other templates get none.
func TestRunnerUserDataHoldsNoRunner(t *testing.T) {
	boot := machinespec.RunnerBoot{Defaults: runnerconfig.Runner{Version: "2.300.0"}, AgentPath: "/usr/local/bin/hyperfleet-bootstrap"}
	runner := &hypervisorv1alpha1.HypervisorMachineTemplate{Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
		Workload:    &hypervisorv1alpha1.WorkloadConfig{Type: hypervisorv1alpha1.WorkloadGitHubRunner, GitHubRunner: &hypervisorv1alpha1.GitHubRunnerWorkload{OS: "linux"}},
		Attestation: &hypervisorv1alpha1.AttestationConfig{Method: hypervisorv1alpha1.AttestationJoinToken},
	}}
	ud, ok, err := boot.UserData(runner, "pool-abc")
	if err != nil || !ok {
		t.Fatalf("UserData = %v, %v", ok, err)
	}
	cfg, err := runnerconfig.ParseUserData(ud)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "pool-abc" || cfg.JITConfig != "" || cfg.Token != "" || len(cfg.Labels) != 0 || cfg.Runner.Version != "2.300.0" || cfg.Runner.OS != "linux" {
		t.Errorf("the agent reads %+v", cfg)
	}
	if err := cfg.Validate(true); err != nil {
		t.Errorf("the agent refuses it: %v", err)
	}
	plain := runner.DeepCopy()
	plain.Spec.Attestation = nil
	if _, ok, _ := boot.UserData(plain, "x"); ok {
		t.Error("a runner template that does not attest got user data without the runner's credential")
	}
	plain = runner.DeepCopy()
	plain.Spec.Workload = nil
	if _, ok, _ := boot.UserData(plain, "x"); ok {
		t.Error("a template without a runner workload got runner user data")
	}
}
