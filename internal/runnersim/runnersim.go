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
	"github.com/hyperfleet/hyperfleet/providers/github/githubsim"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
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
	// Namespace limits the claims looked at; empty is all.
	Namespace string
	// Interval between looks for new Ready machines (200 ms).
	Interval time.Duration
	Log      logr.Logger

	mu      sync.Mutex
	started map[string]bool
	errs    []error
}

// Start looks for Ready runner machines until ctx ends.
func (a *Agents) Start(ctx context.Context) {
	if a.Interval == 0 {
		a.Interval = 200 * time.Millisecond
	}
	a.started = map[string]bool{}
	go func() {
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
	}()
}

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
	opts := []client.ListOption{client.HasLabels{runnerpool.PoolLabel}}
	if a.Namespace != "" {
		opts = append(opts, client.InNamespace(a.Namespace))
	}
	if err := a.Client.List(ctx, &claims, opts...); err != nil {
		return
	}
	for i := range claims.Items {
		c := claims.Items[i]
		key := string(c.UID)
		if c.Status.Phase != hypervisorv1alpha1.MachineReady || c.DeletionTimestamp != nil {
			continue
		}
		a.mu.Lock()
		seen := a.started[key]
		a.started[key] = true
		a.mu.Unlock()
		if !seen {
			go a.run(ctx, &c)
		}
	}
}

// run is one VM's agent: register, run one job, power off.
func (a *Agents) run(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) {
	cfg, err := a.config(ctx, c)
	if err != nil {
		a.fail(fmt.Errorf("claim %s: %w", c.Name, err))
		return
	}
	if a.Process != nil {
		if p := a.Process(c); p != nil {
			if err := p.run(ctx, cfg); err != nil {
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

func (a *Agents) config(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) (runnerpool.BootstrapConfig, error) {
	read := a.UserData
	if read == nil {
		read = func(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) (string, error) {
			return SecretUserData(ctx, a.Client, c)
		}
	}
	ud, err := read(ctx, c)
	if err != nil {
		return runnerpool.BootstrapConfig{}, err
	}
	return runnerpool.ParseUserData(ud)
}

// SecretUserData reads a claim's user data from the Secret its
// userDataSecretRef names, as a KubeVirt guest's cloudInitNoCloud volume does.
func SecretUserData(ctx context.Context, c client.Client, claim *hypervisorv1alpha1.MachineClaim) (string, error) {
	ref := claim.Spec.UserDataSecretRef
	if ref == nil {
		return "", fmt.Errorf("no userDataSecretRef")
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: claim.Namespace, Name: ref.Name}, s); err != nil {
		return "", err
	}
	return string(s.Data[ref.Key]), nil
}
