package main

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
)

// DefaultConfigPath is where cloud-init writes the agent's configuration
// (the RunnerPool puts it in the machine's user data as a write_files entry).
const DefaultConfigPath = runnerconfig.ConfigPath

// Config and Runner are the configuration's one definition, shared with the
// operator that writes it.
type (
	Config = runnerconfig.Config
	Runner = runnerconfig.Runner
)

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
	data, err := takeConfig(path)
	if err != nil {
		return Config{}, err
	}
	c, err := runnerconfig.Decode(data)
	if err != nil {
		return c, fmt.Errorf("configuration %s: %w", path, err)
	}
	applyDefaults(&c, getenv)
	return c, c.Validate(attested)
}

// applyDefaults fills what the configuration leaves empty from the
// environment, then the defaults.
func applyDefaults(c *Config, getenv func(string) string) {
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
