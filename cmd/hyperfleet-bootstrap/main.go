// Command hyperfleet-bootstrap is the agent baked into runner VM images. It
// reads its configuration from cloud-init and deletes it, downloads the
// GitHub Actions runner, registers it as an ephemeral runner, runs exactly
// one job as an unprivileged user, and powers the VM off so the RunnerPool
// deletes it. Everything it does is logged to the console (journal and
// serial console), secrets excepted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("hyperfleet-bootstrap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "Configuration file written by cloud-init. Default: $HYPERFLEET_BOOTSTRAP_CONFIG, else "+DefaultConfigPath+".")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		*path = getenv("HYPERFLEET_BOOTSTRAP_CONFIG")
	}
	if *path == "" {
		*path = DefaultConfigPath
	}
	log := func(format string, a ...any) {
		_, _ = fmt.Fprintf(stdout, "%s hyperfleet-bootstrap: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
	}
	cfg, err := loadConfig(*path, getenv)
	if err != nil {
		log("ERROR %v", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := 0
	if err := bootstrap(ctx, cfg, stdout, log); err != nil {
		log("ERROR %v", err)
		code = 1
	}
	// Power off even after a failure: a VM that cannot serve a job is of no
	// use, and its going away is what tells the pool to replace it.
	if cfg.powerOff() {
		log("Powering off: %s", strings.Join(cfg.PowerOffCommand, " "))
		cmd := exec.Command(cfg.PowerOffCommand[0], cfg.PowerOffCommand[1:]...) //nolint:gosec // the operator's configuration
		cmd.Stdout, cmd.Stderr = stdout, stdout
		if err := cmd.Run(); err != nil {
			log("ERROR powering off: %v", err)
			return 1
		}
	}
	return code
}

// bootstrap installs, registers and runs the runner for one job, as the
// runner's unprivileged user. No credential goes on a command line: a
// registration token reaches config.sh in its environment (config.sh exits
// once registered), and a JIT config is written as the runner's settings
// files (jitFiles), so the long-running listener starts with neither.
func bootstrap(ctx context.Context, cfg Config, console io.Writer, log func(string, ...any)) error {
	u, err := lookupRunnerUser(ctx, cfg.Runner.User, log)
	if err != nil {
		return err
	}
	if err := install(ctx, cfg.Runner, log); err != nil {
		return err
	}
	dir := cfg.Runner.InstallDir
	if u.home == "" {
		u.home = dir // a uid:gid user has no home of its own
	}
	if err := u.ownTree(dir); err != nil {
		return fmt.Errorf("giving %s to the runner's user %s: %w", dir, u.name, err)
	}
	if cfg.JITConfig == "" {
		args := []string{"--unattended", "--ephemeral", "--replace", "--url", cfg.URL,
			"--name", cfg.Name, "--work", cfg.WorkDir}
		if len(cfg.Labels) > 0 {
			args = append(args, "--labels", strings.Join(cfg.Labels, ","))
		}
		if cfg.RunnerGroup != "" {
			args = append(args, "--runnergroup", cfg.RunnerGroup)
		}
		log("Registering runner %s (ephemeral, labels %s, user %s) with %s", cfg.Name, strings.Join(cfg.Labels, ","), u.name, cfg.URL)
		// Runner.Listener reads any argument from ACTIONS_RUNNER_INPUT_<NAME>
		// and removes it from the environment it hands on (CommandSettings.cs).
		if err := script(ctx, dir, cfg.Runner.ConfigScript, args, []string{"ACTIONS_RUNNER_INPUT_TOKEN=" + cfg.Token}, u, console); err != nil {
			return fmt.Errorf("registering the runner: %w", err)
		}
		log("Runner %s registered; waiting for a job", cfg.Name)
		return runJob(ctx, dir, cfg.Runner.RunScript, nil, u, console, log)
	}
	files, err := jitFiles(cfg.JITConfig)
	if err != nil {
		return err
	}
	if err := writeRunnerFiles(dir, files, u); err != nil {
		return fmt.Errorf("writing the runner's just-in-time settings: %w", err)
	}
	log("Starting runner %s (user %s) with its just-in-time settings; waiting for a job", cfg.Name, u.name)
	return runJob(ctx, dir, cfg.Runner.RunScript, nil, u, console, log)
}

func runJob(ctx context.Context, dir, runScript string, env []string, u runnerUser, console io.Writer, log func(string, ...any)) error {
	start := time.Now()
	if err := script(ctx, dir, runScript, nil, env, u, console); err != nil {
		return fmt.Errorf("the runner stopped with an error after %s: %w", time.Since(start).Round(time.Second), err)
	}
	log("The runner finished its job after %s", time.Since(start).Round(time.Second))
	return nil
}

// script runs one of the runner's scripts in its directory, as the
// runner's user, with output on the console. env adds to the agent's
// environment, which never holds a credential itself: the agent's
// configuration came from a file.
func script(ctx context.Context, dir, name string, args, env []string, u runnerUser, console io.Writer) error {
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	cmd := exec.CommandContext(ctx, path, args...) //nolint:gosec // the runner's own script
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = console, console
	cmd.Env = append(runnerEnv(os.Environ(), u), env...)
	u.apply(cmd)
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("%s exited with status %d", name, exit.ExitCode())
	}
	return err
}

// runnerEnv is the environment the runner's processes start with: the
// agent's, without anything that would let the runner run as root or carry
// an input meant for another step, and with the runner user's identity.
func runnerEnv(base []string, u runnerUser) []string {
	out := make([]string, 0, len(base)+3)
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "RUNNER_ALLOW_RUNASROOT", strings.HasPrefix(k, "ACTIONS_RUNNER_INPUT_"):
			continue
		case u.switchTo && (k == "HOME" || k == "USER" || k == "LOGNAME"):
			continue
		}
		out = append(out, kv)
	}
	if u.switchTo {
		out = append(out, "HOME="+u.home, "USER="+u.name, "LOGNAME="+u.name)
	}
	return out
}
