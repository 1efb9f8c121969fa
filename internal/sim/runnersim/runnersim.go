// Package runnersim plays the inside of runner VMs for the sandbox and the
// tests, where no guest boots: for every Ready MachineClaim of a RunnerPool
// it does what cmd/hyperfleet-bootstrap does in a real VM — reads the
// configuration from the claim's cloud-init user data (where the guest
// finds it: the claim's Secret on KubeVirt, the NoCloud ISO on Proxmox),
// registers the runner with githubsim (config.sh), runs it for one job
// (run.sh) and powers the machine off through the hypervisor simulator.
// cmd/hyperfleet-bootstrap's own tests run the real agent, as processes.
package runnersim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// PowerOff powers a claim's machine off from inside, as the agent's
// poweroff does.
type PowerOff func(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) error

// Agents runs one simulated agent per Ready runner machine.
type Agents struct {
	Client   client.Client
	GitHub   *githubsim.Server
	PowerOff PowerOff
	// UserData reads a claim's user data as its guest would (Proxmox: the
	// NoCloud ISO it booted with, NoCloudUserData); nil reads the claim's
	// user-data Secret, which KubeVirt's cloudInitNoCloud volume names.
	UserData func(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) (string, error)
	// Process, when it returns one for a claim, runs the real agent for
	// it as a process (Process) instead of the in-process stand-in.
	Process func(claim *hypervisorv1alpha1.MachineClaim) *Process
	// Mint, where Process is nil, stands in for the SPIRE agent of a
	// machine that attests (Minter): many machines, no agent processes.
	Mint Minter
	// Namespace limits the claims looked at; empty is all.
	Namespace string
	// Interval between looks for new Ready machines (200 ms).
	Interval time.Duration
	// Claims is where each look lists the MachineClaims; nil is Client,
	// a LIST to the API server every Interval. A benchmark gives an
	// informer's cache: its stand-in machines then cost the API server a
	// watch, as real machines cost it nothing, and leave its CPU to the
	// operator being measured.
	Claims client.Reader
	Log    logr.Logger

	mu sync.Mutex
	// started holds the machines whose agent started, by namespace and
	// machine name: the name of the claim holding it (its runner's), or ""
	// once the machine is gone.
	started map[string]string
	errs    []error
	// running counts the scan loop and the agents, for Wait.
	running sync.WaitGroup
}

// Start looks for Ready runner machines until ctx ends.
func (a *Agents) Start(ctx context.Context) {
	if a.Interval == 0 {
		a.Interval = 200 * time.Millisecond
	}
	a.started = map[string]string{}
	a.running.Go(func() {
		t := time.NewTicker(a.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a.scan(ctx)
			}
		}
	})
}

// Wait returns once ctx of Start has ended and every agent with it: an
// agent's process (Process) has exited, and its spire-agent with it.
func (a *Agents) Wait() { a.running.Wait() }

// Errors are what agents could not do (a missing Secret, a refused token).
func (a *Agents) Errors() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

func (a *Agents) fail(err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
	a.Log.Info("Simulated runner agent failed", "error", err.Error())
}

func (a *Agents) scan(ctx context.Context) {
	var claims hypervisorv1alpha1.MachineClaimList
	var opts []client.ListOption
	if a.Namespace != "" {
		opts = append(opts, client.InNamespace(a.Namespace))
	}
	var from client.Reader = a.Client
	if a.Claims != nil {
		from = a.Claims
	}
	if err := from.List(ctx, &claims, opts...); err != nil {
		return
	}
	// A machine is what runs, not a claim: a standby machine a runner's
	// claim takes goes on running the agent that was waiting in it. The
	// claim that holds a machine is the one not being deleted, a runner's
	// before a standby one.
	holders := map[string]*hypervisorv1alpha1.MachineClaim{}
	for i := range claims.Items {
		c := &claims.Items[i]
		_, runner := c.Labels[runnerpool.PoolLabel]
		_, spare := c.Labels[standby.TemplateLabel]
		if !runner && !spare || !c.Spec.TemplateRef.IsMachineTemplate() || c.Status.MachineName == "" || c.DeletionTimestamp != nil {
			// A desk's hot machine (kind Cyberdesk) runs no runner agent.
			continue
		}
		key := c.Namespace + "/" + c.Status.MachineName
		if h, ok := holders[key]; ok && !runner && h.Labels[runnerpool.PoolLabel] != "" {
			continue
		}
		holders[key] = c
	}
	for key, c := range holders {
		a.mu.Lock()
		name, seen := a.started[key]
		switch {
		case seen && name != "":
			// The runner registers under its claim's name: a taken
			// standby machine's is its taker's.
			a.started[key] = c.Name
		case !seen && c.Status.Phase == hypervisorv1alpha1.MachineReady:
			a.started[key] = c.Name
			c := c.DeepCopy()
			a.running.Go(func() { a.run(ctx, c) })
		}
		a.mu.Unlock()
	}
	a.mu.Lock()
	var vanished []string
	for key := range a.started {
		if holders[key] == nil {
			vanished = append(vanished, key)
		}
	}
	a.mu.Unlock()
	for _, key := range vanished {
		a.machineGone(key)
	}
}

// machineGone stops the runner of a machine being deleted, as deleting a
// VM kills the runner inside: a job it was running fails. A runner the
// pool deregistered first is gone already, and nothing happens.
func (a *Agents) machineGone(key string) {
	a.mu.Lock()
	name, ok := a.started[key]
	if ok && name == "" {
		a.mu.Unlock()
		return
	}
	a.started[key] = ""
	a.mu.Unlock()
	if !ok {
		return
	}
	for _, r := range a.GitHub.Runners() {
		if r.Name == name && r.Running {
			if err := a.GitHub.StopRunner(r.ID); err != nil {
				a.Log.V(1).Info("Stopping the runner of a deleted machine failed", "runner", name, "error", err.Error())
			}
		}
	}
}

// run is one VM's agent: register, run one job, power off.
func (a *Agents) run(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) {
	cfg, mc, err := a.config(ctx, c)
	if _, spare := c.Labels[standby.TemplateLabel]; spare && err != nil {
		return // a standby machine of a template that runs no runner
	}
	if err != nil {
		a.fail(fmt.Errorf("claim %s: %w", c.Name, err))
		return
	}
	if a.Process != nil {
		if p := a.Process(c); p != nil {
			if err := p.run(ctx, cfg, mc); err != nil {
				if ctx.Err() == nil {
					a.fail(fmt.Errorf("claim %s: %w", c.Name, err))
				}
				return
			}
			if err := a.PowerOff(ctx, c); err != nil && ctx.Err() == nil {
				a.Log.V(1).Info("Power-off failed (the machine may be gone already)", "claim", c.Name, "error", err.Error())
			}
			return
		}
	}
	if mc != nil && a.Mint == nil {
		// Its credential is handed out only to an SVID of its machine.
		a.fail(fmt.Errorf("claim %s attests with SPIRE: only the real agent can (Agents.Process), or a Minter", c.Name))
		return
	}
	if mc != nil {
		creds, err := fetchMinted(ctx, a.Mint, *mc)
		if err != nil {
			if ctx.Err() == nil {
				a.fail(fmt.Errorf("claim %s: fetching its credentials: %w", c.Name, err))
			}
			return
		}
		cfg.JITConfig, cfg.Token = creds["jitConfig"], creds["token"]
		if u := creds["url"]; u != "" {
			cfg.URL = u
		}
	}
	req := githubsim.RunRequest{Wait: true}
	if cfg.JITConfig != "" {
		req.JITConfig = cfg.JITConfig
	} else {
		rn, err := a.GitHub.RegisterRunner(githubsim.RegisterRequest{
			URL: cfg.URL, Token: cfg.Token, Name: cfg.Name, Labels: cfg.Labels, Ephemeral: true, RunnerGroup: cfg.RunnerGroup, Replace: true,
		})
		if err != nil {
			a.fail(fmt.Errorf("claim %s: config.sh: %w", c.Name, err))
			return
		}
		req.ID = rn.ID
	}
	if _, err := a.GitHub.RunRunner(ctx, req); err != nil {
		if ctx.Err() == nil {
			a.fail(fmt.Errorf("claim %s: run.sh: %w", c.Name, err))
		}
		return
	}
	if ctx.Err() != nil {
		return
	}
	// The job is done and the ephemeral runner gone: the agent powers off.
	if err := a.PowerOff(ctx, c); err != nil && ctx.Err() == nil {
		a.Log.V(1).Info("Power-off failed (the machine may be gone already)", "claim", c.Name, "error", err.Error())
	}
}

// config is the agent's configuration in the claim's user data and, when
// the machine attests, its machine config.
func (a *Agents) config(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) (runnerconfig.Config, *spire.MachineConfig, error) {
	read := a.UserData
	if read == nil {
		read = func(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) (string, error) {
			return SecretUserData(ctx, a.Client, c)
		}
	}
	ud, err := read(ctx, c)
	if err != nil {
		return runnerconfig.Config{}, nil, err
	}
	cfg, err := runnerconfig.ParseUserData(ud)
	if err != nil {
		return cfg, nil, err
	}
	mc, ok, err := attestation.MachineConfigFrom(ud)
	if err != nil || !ok {
		return cfg, nil, err
	}
	return cfg, &mc, nil
}

// SecretUserData reads the user data a claim's KubeVirt guest boots with:
// the cloud-init Secret its VM's cloudInitNoCloud volume names (the claim's
// own user data, plus the attestation part when its template attests).
func SecretUserData(ctx context.Context, c client.Client, claim *hypervisorv1alpha1.MachineClaim) (string, error) {
	if claim.Status.MachineName == "" {
		return "", fmt.Errorf("the claim has no machine yet")
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: kubevirt.CloudInitSecretName(claim.Status.MachineName)}, s); err != nil {
		return "", err
	}
	return string(s.Data[kubevirt.UserDataKey]), nil
}
