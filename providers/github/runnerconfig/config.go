// Package runnerconfig is the one definition of what a RunnerPool hands the
// agent in a runner's machine (cmd/hyperfleet-bootstrap): the configuration
// file, and the cloud-config that writes it and starts the agent. The
// operator encodes it (reconcilers/runnerpool), the agent decodes it; the
// SPIRE attestation configuration beside it is providers/spire's
// MachineConfig.
package runnerconfig

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ConfigPath is where cloud-init writes the configuration in the machine,
// and where the agent reads (and then deletes) it.
const ConfigPath = "/etc/hyperfleet/bootstrap.json"

// Config is the agent's configuration. Token and JITConfig are secrets:
// never logged, and moved to the credential endpoint when the machine
// attests.
type Config struct {
	// URL of the repository or organization, for config.sh --url.
	URL string `json:"url,omitempty"`
	// Token is a registration token.
	Token string `json:"token,omitempty"`
	// JITConfig is an encoded just-in-time runner configuration; with it
	// there is no config.sh step.
	JITConfig string `json:"jitConfig,omitempty"`
	// Name the runner registers under: the MachineClaim's name, so the pool
	// can tell which machine a runner is.
	Name        string   `json:"name"`
	Labels      []string `json:"labels,omitempty"`
	RunnerGroup string   `json:"runnerGroup,omitempty"`
	WorkDir     string   `json:"workDir,omitempty"`
	Runner      Runner   `json:"runner"`
	// PowerOff after the job (default true): the pool sees the machine stop
	// and deletes it.
	PowerOff *bool `json:"powerOff,omitempty"`
	// PowerOffCommand (default ["poweroff"]).
	PowerOffCommand []string `json:"powerOffCommand,omitempty"`
}

// Runner says which actions runner to install and how to run it; empty
// fields leave the agent's defaults (and its environment) in force.
type Runner struct {
	Version string `json:"version,omitempty"`
	OS      string `json:"os,omitempty"`
	Arch    string `json:"arch,omitempty"`
	// DownloadURL may use {version}, {os} and {arch}.
	DownloadURL string `json:"downloadURL,omitempty"`
	// SHA256 of the tarball, checked when set.
	SHA256 string `json:"sha256,omitempty"`
	// InstallDir receives the runner; an install already there is reused.
	InstallDir string `json:"installDir,omitempty"`
	// User the runner (and so every job) runs as: a name, created when
	// missing, or "uid:gid". Never root.
	User         string `json:"user,omitempty"`
	ConfigScript string `json:"configScript,omitempty"`
	RunScript    string `json:"runScript,omitempty"`
	// HTTPTimeout bounds the runner's download, e.g. 30s; default 10m.
	HTTPTimeout string `json:"httpTimeout,omitempty"`
}

// DefaultDownloadTimeout bounds the runner's download when HTTPTimeout is empty.
const DefaultDownloadTimeout = 10 * time.Minute

// DownloadTimeout is HTTPTimeout, or DefaultDownloadTimeout.
func (r Runner) DownloadTimeout() time.Duration {
	if d, err := time.ParseDuration(r.HTTPTimeout); err == nil && d > 0 {
		return d
	}
	return DefaultDownloadTimeout
}

// ExpandedDownloadURL is DownloadURL with {version}, {os} and {arch} filled in.
func (r Runner) ExpandedDownloadURL() string {
	return strings.NewReplacer("{version}", r.Version, "{os}", r.OS, "{arch}", r.Arch).Replace(r.DownloadURL)
}

// PowersOff reports whether the machine powers off after its job.
func (c Config) PowersOff() bool { return c.PowerOff == nil || *c.PowerOff }

// Validate checks the configuration; credentialsLater: the runner's
// credential may still come from the credential endpoint (the machine
// attests), so neither a token nor a JIT configuration is required yet.
func (c Config) Validate(credentialsLater bool) error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("name is required"))
	}
	if c.Runner.HTTPTimeout != "" {
		if d, err := time.ParseDuration(c.Runner.HTTPTimeout); err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("runner.httpTimeout %q is not a positive duration, e.g. 30s", c.Runner.HTTPTimeout))
		}
	}
	switch {
	case c.Token == "" && c.JITConfig == "" && credentialsLater:
	case c.Token == "" && c.JITConfig == "":
		errs = append(errs, errors.New("token (a registration token) or jitConfig is required"))
	case c.Token != "" && c.JITConfig != "":
		errs = append(errs, errors.New("token and jitConfig are mutually exclusive"))
	case c.Token != "" && c.URL == "":
		errs = append(errs, errors.New("url is required with a registration token"))
	}
	return errors.Join(errs...)
}
