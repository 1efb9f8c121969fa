package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"
)

// DefaultConfigPath is where cloud-init writes the agent's configuration
// (the RunnerPool puts it in the machine's user data as a write_files entry).
const DefaultConfigPath = "/etc/hyperfleet/bootstrap.json"

// Config is the agent's configuration. Secrets (token, jitConfig) are never
// logged.
type Config struct {
	// URL of the repository or organization, for config.sh --url.
	URL string `json:"url"`
	// Token is a registration token (RegistrationToken method).
	Token string `json:"token,omitempty"`
	// JITConfig is an encoded just-in-time runner config (JITConfig method);
	// with it there is no config.sh step.
	JITConfig string `json:"jitConfig,omitempty"`
	// Name the runner registers under: the MachineClaim's name, so the pool
	// can tell which VM a runner is.
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

// Runner says which actions runner to download and how to run it.
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
	// User the runner (and so every job) runs as: a name, created with
	// useradd when missing, or "uid:gid". Never root.
	User         string `json:"user,omitempty"`
	ConfigScript string `json:"configScript,omitempty"`
	RunScript    string `json:"runScript,omitempty"`
	// HTTPTimeout bounds the runner's download, e.g. 30s (the template's
	// spec.workload.githubRunner.httpTimeout); default 10m.
	HTTPTimeout string `json:"httpTimeout,omitempty"`
}

// downloadTimeout is HTTPTimeout, or 10 minutes; validate checked it parses.
func (r Runner) downloadTimeout() time.Duration {
	if d, err := time.ParseDuration(r.HTTPTimeout); err == nil && d > 0 {
		return d
	}
	return 10 * time.Minute
}

// Defaults, each overridable by the config file and, where the file leaves
// it empty, by an environment variable.
const (
	defaultRunnerVersion = "2.321.0"
	defaultDownloadURL   = "https://github.com/actions/runner/releases/download/v{version}/actions-runner-{os}-{arch}-{version}.tar.gz"
	defaultInstallDir    = "/opt/actions-runner"
	defaultRunnerUser    = "runner"
)

// loadConfig takes the configuration from path (takeConfig: read, then
// deleted) and fills what it leaves empty from the environment and the
// defaults. attested: the machine attests, and the runner's credential may
// come from the credential endpoint instead (applyCredentials checks it
// then).
func loadConfig(path string, getenv func(string) string, attested bool) (Config, error) {
	var c Config
	data, err := takeConfig(path)
	if err != nil {
		return c, err
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("configuration %s: %w", path, err)
	}
	c.applyDefaults(getenv)
	return c, c.validate(attested)
}

func (c *Config) applyDefaults(getenv func(string) string) {
	pick := func(v *string, env, def string) {
		if *v == "" {
			*v = getenv(env)
		}
		if *v == "" {
			*v = def
		}
	}
	r := &c.Runner
	pick(&r.Version, "RUNNER_VERSION", defaultRunnerVersion)
	pick(&r.OS, "RUNNER_OS", runnerOS(runtime.GOOS))
	pick(&r.Arch, "RUNNER_ARCH", runnerArch(runtime.GOARCH))
	pick(&r.DownloadURL, "RUNNER_DOWNLOAD_URL", defaultDownloadURL)
	pick(&r.SHA256, "RUNNER_SHA256", "")
	pick(&r.InstallDir, "RUNNER_INSTALL_DIR", defaultInstallDir)
	pick(&r.ConfigScript, "RUNNER_CONFIG_SCRIPT", "config.sh")
	pick(&r.RunScript, "RUNNER_RUN_SCRIPT", "run.sh")
	pick(&r.User, "RUNNER_USER", defaultRunnerUser)
	pick(&c.WorkDir, "RUNNER_WORK_DIR", "_work")
	if len(c.PowerOffCommand) == 0 {
		if cmd := getenv("HYPERFLEET_POWEROFF_COMMAND"); cmd != "" {
			c.PowerOffCommand = strings.Fields(cmd)
		} else {
			c.PowerOffCommand = []string{"poweroff"}
		}
	}
}

// validate checks the configuration; credentialsLater: the runner's
// credential may still come from the credential endpoint.
func (c *Config) validate(credentialsLater bool) error {
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

// downloadURL expands the runner's download URL template.
func (r Runner) downloadURL() string {
	return strings.NewReplacer("{version}", r.Version, "{os}", r.OS, "{arch}", r.Arch).Replace(r.DownloadURL)
}

func (c Config) powerOff() bool { return c.PowerOff == nil || *c.PowerOff }

// runnerOS and runnerArch map Go's names to the actions runner's.
func runnerOS(goos string) string {
	switch goos {
	case "darwin":
		return "osx"
	case "windows":
		return "win"
	}
	return goos
}

func runnerArch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x64"
	case "386":
		return "x86"
	}
	return goarch
}
