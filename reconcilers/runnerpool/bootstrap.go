package runnerpool

import (
	"cmp"
	"encoding/json"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
)

// runnerSettings are the operator's settings (--runner-version, …) with
// what the template's spec.workload.githubRunner sets in their place: the
// template describes the image its machines boot, so it wins.
func runnerSettings(operator runnerconfig.Runner, w *hypervisorv1alpha1.WorkloadConfig) runnerconfig.Runner {
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

// credentialsKey is the bootstrap Secret's key holding the runner's
// credential when the machine attests (spec.credentialsSecretRef).
const credentialsKey = "credentials"

// runnerCredentials moves the runner's credential out of cfg into the JSON
// the credential endpoint hands out (spire.Credentials: jitConfig, or
// token and url), leaving cfg with nothing secret in it.
func runnerCredentials(cfg *runnerconfig.Config) (string, error) {
	creds := map[string]string{}
	if cfg.JITConfig != "" {
		creds["jitConfig"] = cfg.JITConfig
	}
	if cfg.Token != "" {
		creds["token"], creds["url"] = cfg.Token, cfg.URL
	}
	data, err := json.Marshal(creds)
	if err != nil {
		return "", err
	}
	cfg.JITConfig, cfg.Token = "", ""
	return string(data), nil
}
