package runnerpool

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// BootstrapConfigPath is where cloud-init writes the agent's configuration
// in the VM; cmd/hyperfleet-bootstrap reads it from there.
const BootstrapConfigPath = "/etc/hyperfleet/bootstrap.json"

// RunnerSettings say which actions runner the agents install; empty fields
// leave the agent's own defaults (and its environment) in force.
type RunnerSettings struct {
	Version      string `json:"version,omitempty"`
	DownloadURL  string `json:"downloadURL,omitempty"`
	SHA256       string `json:"sha256,omitempty"`
	InstallDir   string `json:"installDir,omitempty"`
	ConfigScript string `json:"configScript,omitempty"`
	RunScript    string `json:"runScript,omitempty"`
	// User the runner and its jobs run as (the agent's default: runner).
	User string `json:"user,omitempty"`
	// OS and Arch of the runner package; HTTPTimeout bounds its download.
	OS          string `json:"os,omitempty"`
	Arch        string `json:"arch,omitempty"`
	HTTPTimeout string `json:"httpTimeout,omitempty"`
}

// runnerSettings are the operator's settings (--runner-version, …) with
// what the template's spec.workload.githubRunner sets in their place: the
// template describes the image its machines boot, so it wins.
func runnerSettings(operator RunnerSettings, w *hypervisorv1alpha1.WorkloadConfig) RunnerSettings {
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

// BootstrapConfig is the agent's configuration file, the shape
// cmd/hyperfleet-bootstrap decodes.
type BootstrapConfig struct {
	URL         string         `json:"url,omitempty"`
	Token       string         `json:"token,omitempty"`
	JITConfig   string         `json:"jitConfig,omitempty"`
	Name        string         `json:"name"`
	Labels      []string       `json:"labels,omitempty"`
	RunnerGroup string         `json:"runnerGroup,omitempty"`
	Runner      RunnerSettings `json:"runner"`
}

// credentialsKey is the bootstrap Secret's key holding the runner's
// credential when the machine attests (spec.credentialsSecretRef).
const credentialsKey = "credentials"

// runnerCredentials moves the runner's credential out of cfg into the JSON
// the credential endpoint hands out (spire.Credentials: jitConfig, or
// token and url), leaving cfg with nothing secret in it.
func runnerCredentials(cfg *BootstrapConfig) (string, error) {
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

// userData is the cloud-config that writes the agent's configuration and
// starts the agent. It carries one runner's JIT config or registration
// token — never a long-lived credential — and lives only in a Secret (and,
// on Proxmox, on the NoCloud ISO until the guest has booted). bootcmd runs
// before write_files, so the configuration's directory is root-only before
// the file exists; the agent deletes the file once it has read it.
func userData(cfg BootstrapConfig, agentPath string) (string, error) {
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	b.WriteString("bootcmd:\n")
	fmt.Fprintf(&b, "  - [install, -d, -m, \"0700\", %s]\n", path.Dir(BootstrapConfigPath))
	b.WriteString("write_files:\n")
	fmt.Fprintf(&b, "  - path: %s\n", BootstrapConfigPath)
	b.WriteString("    permissions: \"0600\"\n")
	b.WriteString("    content: |\n")
	for _, line := range strings.Split(string(data), "\n") {
		b.WriteString("      " + line + "\n")
	}
	b.WriteString("runcmd:\n")
	fmt.Fprintf(&b, "  - [%s, --config, %s]\n", agentPath, BootstrapConfigPath)
	return b.String(), nil
}

// ParseUserData finds the agent's configuration in user data made by
// userData, for stand-ins of the VM side (the sandbox, tests).
func ParseUserData(text string) (BootstrapConfig, error) {
	var cfg BootstrapConfig
	marker := "    content: |\n"
	i := strings.Index(text, marker)
	if i < 0 {
		return cfg, fmt.Errorf("no bootstrap configuration in the user data")
	}
	var body strings.Builder
	for _, line := range strings.Split(text[i+len(marker):], "\n") {
		rest, ok := strings.CutPrefix(line, "      ")
		if !ok {
			break
		}
		body.WriteString(rest + "\n")
	}
	if err := json.Unmarshal([]byte(body.String()), &cfg); err != nil {
		return cfg, fmt.Errorf("bootstrap configuration: %w", err)
	}
	return cfg, nil
}
