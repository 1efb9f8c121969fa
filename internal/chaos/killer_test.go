package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
)

// target is the moment a kill is aimed at.
type target string

const (
	// midCreate: a Proxmox clone is running, or a KubeVirt claim is
	// Provisioning.
	midCreate target = "create"
	// midDelete: a deleted claim still holds its finalizer (its machine is
	// being removed).
	midDelete target = "delete"
	// midISO: a user-data ISO upload is running on Proxmox; the operator
	// waits for it inside its reconcile.
	midISO target = "user-data ISO"
)

var targets = []target{midCreate, midDelete, midISO}

// aimBound is how long a kill waits for its target moment; past it the
// leader is killed anyway, and the kill counts as not on target.
const aimBound = time.Minute

// failoverBound is how long a failover may take before the run fails:
// many lease durations, on a loaded machine.
const failoverBound = 2 * time.Minute

// kill is one kill point and the failover it caused.
type kill struct {
	n        int
	aim      target
	onTarget bool
	victim   string
	// successor took the Lease toLeader after the kill, and its
	// machineclaim workers started toWorkers after the kill.
	successor           string
	toLeader, toWorkers time.Duration
}

type killer struct {
	e   *env
	ops *operators
	cfg config
	rng *rand.Rand
}

func newKiller(e *env, ops *operators, cfg config) *killer {
	return &killer{e: e, ops: ops, cfg: cfg, rng: rand.New(rand.NewSource(cfg.seed))}
}

// run kills the leader cfg.kills times and returns every kill point.
func (k *killer) run(b *testing.B, ctx context.Context) []kill {
	b.Helper()
	out := make([]kill, 0, k.cfg.kills)
	for n := 1; n <= k.cfg.kills; n++ {
		aim := targets[k.rng.Intn(len(targets))]
		pause := time.Duration(k.rng.Int63n(int64(3 * time.Second)))
		leader := k.awaitLeader(b, ctx)
		// A random moment: a pause drawn from the seed, then the next time
		// the aimed-at step is under way.
		time.Sleep(pause)
		onTarget := k.await(ctx, aim)
		at := time.Now()
		if _, err := k.ops.Kill(leader); err != nil {
			b.Fatal(err)
		}
		kl := kill{n: n, aim: aim, onTarget: onTarget, victim: leader}
		eventually.That(b, failoverBound, func() (bool, string) {
			h, err := k.ops.holder(ctx)
			if err != nil {
				return false, err.Error()
			}
			kl.successor = h
			return h != "" && h != leader, fmt.Sprintf("the Lease is still held by %q after killing %s", h, leader)
		})
		kl.toLeader = time.Since(at)
		r := k.ops.Replica(kl.successor)
		if r == nil {
			b.Fatalf("the Lease names %q, which is none of the harness's processes", kl.successor)
		}
		eventually.True(b, failoverBound, kl.successor+" starts its machineclaim workers", func() bool {
			select {
			case <-r.Ready:
				return true
			default:
				return false
			}
		})
		kl.toWorkers = r.ReadyAt.Sub(at)
		out = append(out, kl)
		fmt.Fprintf(os.Stderr, "chaos: kill %2d/%d aimed at %-13s %-10s %s → %s: new leader %5.1fs, reconciling %5.1fs\n",
			n, k.cfg.kills, aim, hitOrMiss(onTarget), leader, kl.successor, kl.toLeader.Seconds(), kl.toWorkers.Seconds())
	}
	return out
}

func hitOrMiss(on bool) string {
	if on {
		return "(on it)"
	}
	return "(missed)"
}

// awaitLeader waits until the Lease names a live process whose workers
// run, and returns its identity.
func (k *killer) awaitLeader(b *testing.B, ctx context.Context) string {
	b.Helper()
	var leader string
	eventually.That(b, failoverBound, func() (bool, string) {
		h, err := k.ops.holder(ctx)
		if err != nil {
			return false, err.Error()
		}
		leader = h
		r := k.ops.Replica(h)
		if r == nil {
			return false, fmt.Sprintf("Lease holder %q is not a harness process", h)
		}
		select {
		case <-r.Exited:
			return false, h + " holds the Lease but has exited"
		default:
		}
		select {
		case <-r.Ready:
			return true, ""
		default:
			return false, h + " holds the Lease but has not started its workers"
		}
	})
	return leader
}

// await waits, up to aimBound, for a moment when aim is under way, and
// reports whether it came. It is a trigger, not an assertion: a target
// that does not come in time is recorded as missed.
func (k *killer) await(ctx context.Context, aim target) bool {
	deadline := time.Now().Add(aimBound)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if k.underWay(ctx, aim) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func (k *killer) underWay(ctx context.Context, aim target) bool {
	switch aim {
	case midISO:
		return k.taskRunning("imgcopy")
	case midCreate:
		if k.taskRunning("qmclone") {
			return true
		}
	}
	list := &hypervisorv1alpha1.MachineClaimList{}
	if err := k.e.c.List(ctx, list, client.InNamespace(workNamespace)); err != nil {
		return false
	}
	for _, mc := range list.Items {
		deleting := !mc.DeletionTimestamp.IsZero() && len(mc.Finalizers) > 0
		switch {
		case aim == midDelete && deleting:
			return true
		case aim == midCreate && !deleting && mc.Spec.TemplateRef.Name == kvTemplate && mc.Status.Phase == hypervisorv1alpha1.MachineProvisioning:
			return true
		}
	}
	return false
}

func (k *killer) taskRunning(typ string) bool {
	for _, t := range k.e.pve.Tasks() {
		if t.Running && t.Type == typ {
			return true
		}
	}
	return false
}
