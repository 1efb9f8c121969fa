package chaos

import (
	"context"
	"math/rand"
	"sort"
	"sync"
	"time"

	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
)

// pveFaults are the Proxmox faults drawn from, each armed for one request:
// every step of a claim's life fails once in a while, the ISO upload and
// its removal included.
var pveFaults = []struct {
	name  string
	fault proxmoxsim.Fault
}{
	{"clone task fails", proxmoxsim.Fault{Operation: proxmoxsim.OpClone, Action: proxmoxsim.FaultTaskFail, Message: "injected: clone failed"}},
	{"clone call 500", proxmoxsim.Fault{Operation: proxmoxsim.OpClone, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "injected"}},
	{"ISO upload task fails", proxmoxsim.Fault{Operation: proxmoxsim.OpUpload, Action: proxmoxsim.FaultTaskFail, Message: "injected: upload failed"}},
	{"ISO upload 500", proxmoxsim.Fault{Operation: proxmoxsim.OpUpload, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "injected"}},
	{"ISO delete 500", proxmoxsim.Fault{Operation: proxmoxsim.OpVolumeDelete, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "injected"}},
	{"destroy task fails", proxmoxsim.Fault{Operation: proxmoxsim.OpDelete, Action: proxmoxsim.FaultTaskFail, Message: "injected: destroy failed"}},
	{"destroy call 500", proxmoxsim.Fault{Operation: proxmoxsim.OpDelete, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "injected"}},
	{"start task fails", proxmoxsim.Fault{Operation: proxmoxsim.OpStart, Action: proxmoxsim.FaultTaskFail, Message: "injected: start failed"}},
	{"stop call 500", proxmoxsim.Fault{Operation: proxmoxsim.OpStop, Action: proxmoxsim.FaultHTTPError, Status: 500, Message: "injected"}},
	{"config locked", proxmoxsim.Fault{Operation: proxmoxsim.OpConfigSet, Action: proxmoxsim.FaultLockError}},
	{"config read 503", proxmoxsim.Fault{Operation: proxmoxsim.OpConfigGet, Action: proxmoxsim.FaultHTTPError, Status: 503}},
	{"status connection dropped", proxmoxsim.Fault{Operation: proxmoxsim.OpVMStatus, Action: proxmoxsim.FaultDrop}},
	{"resources 3 s slow", proxmoxsim.Fault{Operation: proxmoxsim.OpClusterResources, Action: proxmoxsim.FaultDelay, Delay: 3 * time.Second}},
	{"task status hangs", proxmoxsim.Fault{Operation: proxmoxsim.OpTaskStatus, Action: proxmoxsim.FaultHang}},
}

// The KubeVirt faults: what kubevirtsim can do to a machine.
const (
	kvFailVMI       = "VMI fails (virt-launcher crash)"
	kvGuestShutdown = "guest shuts itself down"
	kvHangSchedule  = "VM unschedulable for 2–6 s"
)

// injector arms one fault at a time, at the configured rate, on either
// simulator: seven in ten on Proxmox, the rest on KubeVirt.
type injector struct {
	e     *env
	every time.Duration
	rng   *rand.Rand

	mu       sync.Mutex
	injected map[string]int
	// held are the VMs kept unschedulable, released at their time or at stop.
	held map[string]*time.Timer
}

func newInjector(e *env, cfg config) *injector {
	in := &injector{e: e, rng: rand.New(rand.NewSource(cfg.seed + 2)),
		injected: map[string]int{}, held: map[string]*time.Timer{}}
	if cfg.faultsPerMinute > 0 {
		in.every = time.Minute / time.Duration(cfg.faultsPerMinute)
	}
	return in
}

func (in *injector) run(ctx context.Context) {
	if in.every == 0 {
		return
	}
	for {
		// Jittered between half and one and a half times the mean pause.
		pause := in.every/2 + time.Duration(in.rng.Int63n(int64(in.every)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		if in.rng.Intn(10) < 7 {
			f := pveFaults[in.rng.Intn(len(pveFaults))]
			f.fault.Times = 1
			if err := in.e.pve.InjectFault(f.fault); err == nil {
				in.count(f.name)
			}
			continue
		}
		in.kubevirt(ctx)
	}
}

// kubevirt picks a fault and a VMI (or VM) at random; with none to hit,
// nothing is counted.
func (in *injector) kubevirt(ctx context.Context) {
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := in.e.c.List(ctx, vmis, client.InNamespace(workNamespace)); err != nil || len(vmis.Items) == 0 {
		return
	}
	vmi := vmis.Items[in.rng.Intn(len(vmis.Items))]
	switch in.rng.Intn(3) {
	case 0:
		if in.e.kv.FailVMI(vmi.Namespace, vmi.Name) == nil {
			in.count(kvFailVMI)
		}
	case 1:
		if in.e.kv.GuestShutdown(vmi.Namespace, vmi.Name) == nil {
			in.count(kvGuestShutdown)
		}
	default:
		hold := 2*time.Second + time.Duration(in.rng.Int63n(int64(4*time.Second)))
		in.mu.Lock()
		defer in.mu.Unlock()
		if _, ok := in.held[vmi.Name]; ok {
			return
		}
		in.e.kv.HangScheduling(vmi.Namespace, vmi.Name)
		in.held[vmi.Name] = time.AfterFunc(hold, func() { in.release(vmi.Namespace, vmi.Name) })
		in.injected[kvHangSchedule]++
	}
}

func (in *injector) release(namespace, name string) {
	in.mu.Lock()
	delete(in.held, name)
	in.mu.Unlock()
	in.e.kv.ReleaseScheduling(namespace, name)
}

func (in *injector) count(name string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.injected[name]++
}

// stop disarms every fault: Proxmox's not yet triggered, KubeVirt's holds.
// It returns how many Proxmox faults were still armed (never triggered).
func (in *injector) stop() int {
	pending := in.e.pve.PendingFaults()
	in.e.pve.ClearFaults()
	in.mu.Lock()
	held := make([]string, 0, len(in.held))
	for name, t := range in.held {
		t.Stop()
		held = append(held, name)
	}
	in.held = map[string]*time.Timer{}
	in.mu.Unlock()
	for _, name := range held {
		in.e.kv.ReleaseScheduling(workNamespace, name)
	}
	return pending
}

// summary lists the faults injected, by kind, most first.
func (in *injector) summary() (total int, kinds []string, counts map[string]int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	counts = map[string]int{}
	for k, n := range in.injected {
		counts[k] = n
		kinds = append(kinds, k)
		total += n
	}
	sort.Slice(kinds, func(i, j int) bool {
		if counts[kinds[i]] != counts[kinds[j]] {
			return counts[kinds[i]] > counts[kinds[j]]
		}
		return kinds[i] < kinds[j]
	})
	return total, kinds, counts
}
