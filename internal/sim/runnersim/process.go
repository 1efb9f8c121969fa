package runnersim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// Process runs the real bootstrap agent (cmd/hyperfleet-bootstrap) for one
// simulated VM, as a process, instead of the in-process stand-in: the
// agent's configuration is written where cloud-init writes it, under Root,
// the VM's filesystem, and the agent takes it from there.
type Process struct {
	// Agent is the hyperfleet-bootstrap binary.
	Agent string
	// Root stands for the VM's filesystem: the configuration goes to
	// Root/etc/hyperfleet/bootstrap.json.
	Root string
	// Runner says where the (preinstalled) runner is and whom it runs as;
	// it overrides what the user data says of the runner.
	Runner runnerconfig.Runner
	// Env is the agent's environment.
	Env []string
	// Console receives the agent's output.
	Console io.Writer
	// SPIREAgent is the spire-agent binary, for a machine that attests;
	// AgentDir the agent's directory (short: its socket path must fit in
	// 108 bytes).
	SPIREAgent, AgentDir string
}

// run writes the configuration and runs the agent to its end; its
// power-off command does nothing, and the caller powers the machine off
// through the simulator once the agent has exited.
func (p *Process) run(ctx context.Context, cfg runnerconfig.Config, mc *spire.MachineConfig) error {
	cfg.Runner = p.Runner
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	fields["powerOffCommand"] = []string{"true"}
	if data, err = json.Marshal(fields); err != nil {
		return err
	}
	path := filepath.Join(p.Root, "etc", "hyperfleet", "bootstrap.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	args := []string{"--config", path}
	if mc != nil {
		// Where cloud-init writes it (spire.MachineConfigPath), under Root.
		att := filepath.Join(p.Root, "etc", "hyperfleet", filepath.Base(spire.MachineConfigPath))
		data, err := json.Marshal(mc)
		if err != nil {
			return err
		}
		if err := os.WriteFile(att, data, 0o600); err != nil {
			return err
		}
		args = append(args, "--attestation", att, "--spire-agent", p.SPIREAgent, "--spire-agent-dir", p.AgentDir)
	}
	cmd := exec.CommandContext(ctx, p.Agent, args...) //nolint:gosec // the test's own binary
	// When ctx ends the machine shuts down: SIGTERM, on which the agent
	// stops its spire-agent (in a process group of its own, which a SIGKILL
	// of the agent would leave running); SIGKILL only if it hangs.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	cmd.Env = p.Env
	if p.Console != nil {
		cmd.Stdout, cmd.Stderr = p.Console, p.Console
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the bootstrap agent: %w", err)
	}
	return nil
}
