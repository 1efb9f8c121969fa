package machinespec

import (
	"cmp"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
)

// RunnerSettings are the operator's settings (--runner-version, …) with
// what the template's spec.workload.githubRunner sets in their place: the
// template describes the image its machines boot, so it wins.
func RunnerSettings(operator runnerconfig.Runner, w *hypervisorv1alpha1.WorkloadConfig) runnerconfig.Runner {
	if w == nil || w.GitHubRunner == nil {
		return operator
	}
	g, out := w.GitHubRunner, operator
	out.Version = cmp.Or(g.RunnerVersion, out.Version)
	out.DownloadURL = cmp.Or(g.DownloadURL, out.DownloadURL)
	out.OS = cmp.Or(g.OS, out.OS)
	out.Arch = cmp.Or(g.Arch, out.Arch)
	out.InstallDir = cmp.Or(g.WorkDir, out.InstallDir)
	out.ConfigScript = cmp.Or(g.ConfigScript, out.ConfigScript)
	out.RunScript = cmp.Or(g.RunScript, out.RunScript)
	if g.HTTPTimeout != nil && g.HTTPTimeout.Duration > 0 {
		out.HTTPTimeout = g.HTTPTimeout.Duration.String()
	}
	return out
}

// RunnerBoot is how the operator boots runner machines: its runner
// settings (flags) and where the bootstrap agent is in runner images.
type RunnerBoot struct {
	Defaults  runnerconfig.Runner
	AgentPath string
}

// UserData is the user data of a machine of a runner template that
// attests, for a claim that brings none of its own: the bootstrap agent
// and the runner to install, and nothing of any one runner. The runner's
// JIT configuration, which names it and registers it, reaches the machine
// only through the credential endpoint, once the machine attested and a
// claim that holds it has one. So the same user data boots a runner made
// for one job and a standby machine no job has taken yet. ok is false for
// any other template: its claims boot with the template's user data.
func (b RunnerBoot) UserData(t *hypervisorv1alpha1.HypervisorMachineTemplate, claimName string) (ud string, ok bool, err error) {
	if !BootsRunners(t) || b.AgentPath == "" {
		return "", false, nil
	}
	ud, err = runnerconfig.UserData(runnerconfig.Config{Name: claimName, Runner: RunnerSettings(b.Defaults, t.Spec.Workload)}, b.AgentPath)
	return ud, err == nil, err
}

// BootsRunners reports whether t's claims that bring no user data boot
// with RunnerBoot's: its workload is github-runner and it attests.
func BootsRunners(t *hypervisorv1alpha1.HypervisorMachineTemplate) bool {
	w, a := t.Spec.Workload, t.Spec.Attestation
	return w != nil && w.Type == hypervisorv1alpha1.WorkloadGitHubRunner && a != nil && a.Method != "" && a.Method != hypervisorv1alpha1.AttestationNone
}
