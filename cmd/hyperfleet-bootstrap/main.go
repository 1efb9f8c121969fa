// Command hyperfleet-bootstrap is the agent baked into runner VM images. It
// reads its configuration from cloud-init and deletes it, downloads the
// GitHub Actions runner, registers it as an ephemeral runner, runs exactly
// one job as an unprivileged user, and powers the VM off so the RunnerPool
// deletes it. Everything it does is logged to the console (journal and
// serial console), secrets excepted.
//
// With attestation, the user data carries no runner credential but
// /etc/hyperfleet/attestation.json (spire.MachineConfig: a single-use join
// token, the SPIRE server's address and trust bundle, the SPIFFE ID the
// machine's bootstrap workload gets, and the credential endpoint). The
// agent reads and deletes it, runs spire-agent with the token in a 0600
// file (never on a command line; the token is redacted from the agent's
// output), waits for an X509-SVID with exactly that SPIFFE ID from the
// Workload API, POSTs to the credential endpoint over mTLS (the endpoint
// must present its own SPIFFE ID), and stops spire-agent before anything
// of the runner starts, so no job can get the machine's SVID. The
// credentials it receives (jitConfig, or token and url) fill what
// bootstrap.json leaves out. Without the file, nothing of this happens.
//
// `hyperfleet-bootstrap attest` is for machines whose workload is none: it
// attests, POSTs once to the endpoint (the operator's proof that the
// machine attested), and keeps spire-agent, so the machine's identity,
// until the agent exits or the command is stopped.
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

// run is the command; SIGINT and SIGTERM cancel its context.
func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdout, stderr, getenv)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	log := func(format string, a ...any) {
		_, _ = fmt.Fprintf(stdout, "%s hyperfleet-bootstrap: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
	}
	if len(args) > 0 && args[0] == "attest" {
		return attestCommand(ctx, args[1:], stdout, stderr, getenv, log)
	}
	fs := flag.NewFlagSet("hyperfleet-bootstrap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "Configuration file written by cloud-init. Default: $HYPERFLEET_BOOTSTRAP_CONFIG, else "+DefaultConfigPath+".")
	var opts attestOptions
	opts.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		*path = getenv("HYPERFLEET_BOOTSTRAP_CONFIG")
	}
	if *path == "" {
		*path = DefaultConfigPath
	}
	opts.fill(getenv)
	// The attestation configuration goes first: it is deleted even when
	// bootstrap.json turns out to be wrong.
	machine, attested, takeErr := takeMachineConfig(opts.config)
	cfg, err := loadConfig(*path, getenv, attested)
	if err != nil {
		log("ERROR %v", errors.Join(err, takeErr))
		return 1
	}
	code := 0
	err = takeErr
	if err == nil {
		var att []byte
		if attested {
			att = machine
		}
		err = bootstrap(ctx, cfg, att, opts, stdout, log)
	}
	if err != nil {
		log("ERROR %v", err)
		code = 1
	}
	// Power off even after a failure: a VM that cannot serve a job is of no
	// use, and its going away is what tells the pool to replace it.
	if cfg.PowersOff() {
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
//
// machine, when not nil, is the attestation configuration: the machine
// attests first, and the runner's credential may come from the credential
// endpoint (attestForRunner).
func bootstrap(ctx context.Context, cfg Config, machine []byte, opts attestOptions, console io.Writer, log func(string, ...any)) error {
	if machine != nil {
		if err := attestForRunner(ctx, &cfg, machine, opts, console, log); err != nil {
			return err
		}
	}
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

// attestForRunner attests the machine, fetches the runner's credential
// from the credential endpoint into cfg, and stops the SPIRE agent before
// anything of the runner starts: a job runs on this machine, and must
// never get the machine's SVID (it would fetch or claim what the machine
// may). Attesting and fetching share one deadline, opts.timeout, except
// that a standby machine waits for a claim for as long as it lives.
func attestForRunner(ctx context.Context, cfg *Config, machine []byte, opts attestOptions, console io.Writer, log func(string, ...any)) error {
	standby := ctx
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	a, err := attest(ctx, machine, opts, console, log)
	if err != nil {
		return err
	}
	defer a.close(log)
	creds, err := a.credentials(ctx, standby, log)
	if err != nil {
		return err
	}
	return applyCredentials(cfg, creds)
}

// attestCommand is `hyperfleet-bootstrap attest`: for a machine whose
// workload is none, which only proves who it is and keeps its identity.
func attestCommand(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, log func(string, ...any)) int {
	fs := flag.NewFlagSet("hyperfleet-bootstrap attest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts attestOptions
	opts.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "hyperfleet-bootstrap attest takes no arguments, only flags (got %q)\n", fs.Args())
		return 2
	}
	opts.fill(getenv)
	if err := attestOnly(ctx, opts, stdout, log); err != nil {
		log("ERROR %v", err)
		return 1
	}
	return 0
}

// attestOnly attests, POSTs once to the credential endpoint if there is
// one (the operator's proof that the machine attested), and keeps the
// agent, so the machine's identity, until the agent exits (an error) or
// ctx ends (SIGTERM: the agent is stopped, and that is success).
func attestOnly(ctx context.Context, opts attestOptions, console io.Writer, log func(string, ...any)) error {
	machine, present, err := takeMachineConfig(opts.config)
	if err != nil {
		return err
	}
	if !present {
		return fmt.Errorf("no attestation configuration at %s: nothing to attest with", opts.config)
	}
	actx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	a, err := attest(actx, machine, opts, console, log)
	if err != nil {
		return err
	}
	defer a.close(log)
	creds, err := a.credentials(actx, ctx, log)
	if err != nil {
		return err
	}
	if len(creds) > 0 {
		log("This machine runs no workload: the credentials (%s) are not used", strings.Join(names(creds), ", "))
	}
	// This process needs the SVID no more; the agent keeps the machine's
	// identity (it renews its own SVID) for the machine's other workloads.
	_ = a.source.Close()
	a.source = nil
	log("spire-agent (pid %d) keeps the machine's identity until it exits or this command is stopped", a.agent.pid())
	select {
	case <-ctx.Done():
		return nil
	case <-a.agent.done:
		return fmt.Errorf("spire-agent exited (%w); the machine has lost its identity; its last lines:\n%s", a.agent.exitErr(), a.agent.lastLines())
	}
}
