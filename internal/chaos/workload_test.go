package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// userData makes a Proxmox claim's machine get its own NoCloud ISO (the
// step a kill is aimed at) and a KubeVirt one its cloud-init Secret.
const userData = "#cloud-config\nruncmd:\n  - echo chaos\n"

// readyBound is how long a claim may take to be Ready before the workload
// deletes it anyway: faults and failovers slow claims, and the workload
// must keep moving.
const readyBound = 2 * time.Minute

// workload keeps a few claims alive on each cluster, each deleted at a
// moment drawn at its creation: some while still being made, the others a
// little after they are Ready. Claims that ended (Terminated, Failed) are
// deleted at once. One loop, one tick at a time, as a user's script would.
type workload struct {
	e     *env
	rng   *rand.Rand
	slots map[string]int // template → claims alive at once

	mu sync.Mutex
	// plans: claim name → when to delete it.
	plans   map[string]plan
	seq     int
	made    int
	gone    int
	known   map[string]types.UID
	errors  int
	lastErr string
	// ready: claims seen Ready, per template.
	ready map[string]map[string]bool
	// madeBy: claims made, per template.
	madeBy map[string]int
}

// plan is when one claim is deleted: at a fixed time (mid-create) or hold
// after it is Ready.
type plan struct {
	at       time.Time
	hold     time.Duration
	midStart bool
}

func newWorkload(e *env, cfg config) *workload {
	return &workload{e: e, rng: rand.New(rand.NewSource(cfg.seed + 1)),
		slots: map[string]int{pveTemplate: cfg.proxmoxSlots, kvTemplate: cfg.kubevirtSlots},
		plans: map[string]plan{}, known: map[string]types.UID{},
		ready: map[string]map[string]bool{pveTemplate: {}, kvTemplate: {}}, madeBy: map[string]int{}}
}

// run ticks until ctx ends.
func (w *workload) run(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		w.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *workload) step(ctx context.Context) {
	list := &hypervisorv1alpha1.MachineClaimList{}
	if err := w.e.c.List(ctx, list, client.InNamespace(workNamespace)); err != nil {
		if ctx.Err() == nil {
			w.fail(err)
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	present := map[string]bool{}
	alive := map[string]int{}
	for i := range list.Items {
		mc := &list.Items[i]
		present[mc.Name] = true
		if mc.Status.ReadyTime != nil && w.ready[mc.Spec.TemplateRef.Name] != nil {
			w.ready[mc.Spec.TemplateRef.Name][mc.Name] = true
		}
		if !mc.DeletionTimestamp.IsZero() {
			continue
		}
		alive[mc.Spec.TemplateRef.Name]++
		if w.due(mc, now) {
			if err := w.e.c.Delete(ctx, mc, client.Preconditions{UID: &mc.UID}); client.IgnoreNotFound(err) != nil {
				w.failLocked(err)
			}
		}
	}
	for name := range w.known {
		if !present[name] {
			delete(w.known, name)
			delete(w.plans, name)
			w.gone++
		}
	}
	for tmpl, want := range w.slots {
		for n := alive[tmpl]; n < want; n++ {
			w.createLocked(ctx, tmpl, now)
		}
	}
}

// due reports whether the claim's deletion time has come.
func (w *workload) due(mc *hypervisorv1alpha1.MachineClaim, now time.Time) bool {
	p, ok := w.plans[mc.Name]
	switch {
	case !ok:
		return true // left by an earlier step that failed: clean it up
	case mc.Status.Phase == hypervisorv1alpha1.MachineTerminated, mc.Status.Phase == hypervisorv1alpha1.MachineFailed:
		return true
	case p.midStart:
		return now.After(p.at)
	case mc.Status.ReadyTime != nil:
		return now.After(mc.Status.ReadyTime.Add(p.hold))
	}
	return now.Sub(mc.CreationTimestamp.Time) > readyBound
}

func (w *workload) createLocked(ctx context.Context, tmpl string, now time.Time) {
	w.seq++
	name := fmt.Sprintf("%s-%04d", tmpl, w.seq)
	mc := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workNamespace},
		Spec: hypervisorv1alpha1.MachineClaimSpec{
			TemplateRef: hypervisorv1alpha1.TemplateReference{Name: tmpl},
			// Longer than readyBound: the workload, not the operator, gives up.
			ProvisioningTimeout: &metav1.Duration{Duration: 10 * time.Minute},
		},
	}
	// Two claims in three carry user data: the ISO step is one of the three
	// kill targets.
	if w.rng.Intn(3) > 0 {
		mc.Spec.UserData = userData
	}
	// Two in five are deleted while still being made, within 0.5–6 s.
	p := plan{hold: time.Duration(w.rng.Int63n(int64(3 * time.Second)))}
	if w.rng.Intn(5) < 2 {
		p.midStart = true
		p.at = now.Add(500*time.Millisecond + time.Duration(w.rng.Int63n(int64(5500*time.Millisecond))))
	}
	if err := w.e.c.Create(ctx, mc); err != nil {
		w.failLocked(err)
		return
	}
	w.plans[name] = p
	w.known[name] = mc.UID
	w.made++
	w.madeBy[tmpl]++
}

func (w *workload) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failLocked(err)
}

func (w *workload) failLocked(err error) {
	w.errors++
	w.lastErr = err.Error()
}

// counts: claims created, and claims seen gone after being created.
func (w *workload) counts() (made, gone int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.made, w.gone
}

// perCluster says, per cluster, how many claims were made and how many
// were seen Ready.
func (w *workload) perCluster() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("Proxmox %d made, %d Ready; KubeVirt %d made, %d Ready",
		w.madeBy[pveTemplate], len(w.ready[pveTemplate]), w.madeBy[kvTemplate], len(w.ready[kvTemplate]))
}

// errorCount is how many API calls of the workload failed, and the last error.
func (w *workload) errorCount() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errors, w.lastErr
}

// settle counts the claims gone since the last step, once the workload
// has stopped: the final drain's deletions.
func (w *workload) settle(ctx context.Context) error {
	list := &hypervisorv1alpha1.MachineClaimList{}
	if err := w.e.c.List(ctx, list, client.InNamespace(workNamespace)); err != nil {
		return err
	}
	present := map[string]bool{}
	for _, mc := range list.Items {
		present[mc.Name] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.known {
		if !present[name] {
			delete(w.known, name)
			w.gone++
		}
	}
	return nil
}

// deleteAll deletes every claim left, for the final drain.
func (w *workload) deleteAll(ctx context.Context) error {
	return w.e.c.DeleteAllOf(ctx, &hypervisorv1alpha1.MachineClaim{}, client.InNamespace(workNamespace))
}
