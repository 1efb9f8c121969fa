package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/sim/spirelocal"
	"github.com/hyperfleet/hyperfleet/internal/sim/swtpmlocal"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
)

// tpmHost plays the hypervisor host of machines that attest with their TPM
// (samples/23-kubevirt-tpm-template.yaml): it manufactures each one's vTPM
// (swtpm, with an EK certificate from its local CA), provisions it with a
// DevID for the claim's UID, and runs the machine's hyperfleet-bootstrap
// `attest` against it. The SPIRE server trusts its local CA and DevID
// authority.
type tpmHost struct {
	dir  string
	host *swtpmlocal.Host

	mu       sync.Mutex
	machines map[string]context.CancelFunc // claim UID → its machine's stop
	count    int
	running  sync.WaitGroup
}

// newTPMHost sets up the host's vTPM manufacturer and DevID authority in
// dir and returns the SPIRE server's tpm_devid configuration trusting them.
func newTPMHost(dir string) (*tpmHost, *spirelocal.TPM, error) {
	host, err := swtpmlocal.NewHost(dir, "HyperFleet sandbox DevID CA")
	if err != nil {
		return nil, nil, fmt.Errorf("the TPM demo machine's vTPM: %w", err)
	}
	h := &tpmHost{dir: dir, host: host, machines: map[string]context.CancelFunc{}}
	return h, &spirelocal.TPM{DevIDCA: host.DevIDCA, EndorsementCA: host.EndorsementCA}, nil
}

// start boots a machine for every Ready claim of namespace that attests
// with its TPM, and stops it when its claim goes, until ctx ends.
func (h *tpmHost) start(ctx context.Context, c client.Client, namespace string, r *attestationRig, log logr.Logger) {
	h.running.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			h.scan(ctx, c, namespace, r, log)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

func (h *tpmHost) scan(ctx context.Context, c client.Client, namespace string, r *attestationRig, log logr.Logger) {
	var claims hypervisorv1alpha1.MachineClaimList
	if err := c.List(ctx, &claims, client.InNamespace(namespace)); err != nil {
		return
	}
	listed := map[string]bool{}
	for i := range claims.Items {
		claim := claims.Items[i]
		st := claim.Status.Attestation
		if st == nil || st.Method != hypervisorv1alpha1.AttestationTPM || claim.DeletionTimestamp != nil {
			continue
		}
		uid := string(claim.UID)
		listed[uid] = true
		h.mu.Lock()
		_, seen := h.machines[uid]
		if !seen && claim.Status.Phase == hypervisorv1alpha1.MachineReady {
			mctx, cancel := context.WithCancel(ctx)
			h.machines[uid] = cancel
			h.count++
			n := h.count
			h.running.Go(func() {
				if err := h.boot(mctx, c, &claim, r, n); err != nil && mctx.Err() == nil {
					log.Error(err, "The TPM demo machine failed", "claim", claim.Name)
				}
			})
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for uid, stop := range h.machines {
		if !listed[uid] {
			stop() // its claim is gone: the machine is deleted
		}
	}
}

// boot is one machine: the host manufactures and provisions its vTPM, the
// guest reads its user data and runs `hyperfleet-bootstrap attest`, which
// keeps the machine's identity until the machine stops.
func (h *tpmHost) boot(ctx context.Context, c client.Client, claim *hypervisorv1alpha1.MachineClaim, r *attestationRig, n int) error {
	dir := filepath.Join(h.dir, "m"+strconv.Itoa(n))
	tpm, err := h.host.Machine(dir, string(claim.UID))
	if err != nil {
		return err
	}
	defer tpm.Stop()
	ud, err := runnersim.SecretUserData(ctx, c, claim)
	if err != nil {
		return err
	}
	mc, ok, err := attestation.MachineConfigFrom(ud)
	if err != nil {
		return fmt.Errorf("the machine's user data: %w", err)
	}
	if !ok {
		return errors.New("the machine's user data has no attestation configuration")
	}
	data, err := json.Marshal(mc)
	if err != nil {
		return err
	}
	att := filepath.Join(dir, filepath.Base(spire.MachineConfigPath))
	if err := os.WriteFile(att, data, 0o600); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, r.agent, "attest", "--attestation", att, //nolint:gosec // the sandbox's own binary
		"--spire-agent", filepath.Join(r.bin, "spire-agent"), "--spire-agent-dir", filepath.Join(dir, "a"), "--tpm-device", tpm.Path)
	// The machine shuts down: SIGTERM, on which the agent stops its
	// spire-agent.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	out := console(filepath.Join(dir, "console.log"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("hyperfleet-bootstrap attest: %w (console: %s)", err, string(out))
	}
	return nil
}

// wait waits for the machines' processes to end once ctx has.
func (h *tpmHost) wait() { h.running.Wait() }
