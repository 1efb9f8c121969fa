package pacing_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m)
}

// startOperator runs the claim, cluster and template reconcilers as the
// operator does, and returns its stop. ObserveInterval, the only timer that
// would look at a claim waiting for a task or a clone slot, is an hour: in
// these tests only a wake from the provider moves such a claim on.
func startOperator(t *testing.T) (stop func()) {
	t.Helper()
	mgr, err := manager.New(testenv.Config(), manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: "default",
		ObserveInterval: time.Hour, FinalizationTimeout: time.Minute,
		OrphanSweepInterval: time.Hour, OrphanGrace: time.Hour,
		SkipControllerNameValidation: true,
		Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
			manager.ControllerMachineClaim},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(testenv.StartManager(mgr))
	t.Cleanup(stop)
	return stop
}

// oneCloneSlot gives the lab's cluster a single clone slot.
func oneCloneSlot(clone time.Duration) hypervisorlab.Option {
	return func(o *proxmoxsim.Options, c *hypervisorv1alpha1.HypervisorCluster) {
		o.Latencies = proxmoxsim.DefaultLatencies()
		o.Latencies.Clone = clone
		c.Spec.Proxmox.MaxConcurrentClonesPerNode = 1
		c.Spec.Proxmox.MaxConcurrentClonesPerStorage = 1
	}
}

func claim(l *hypervisorlab.Lab, name string) *hypervisorv1alpha1.MachineClaim {
	mc := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
	}
	l.Create(mc)
	return mc
}

// claimsInOrder creates the claims one after the other, each in a later
// second than the one before: creationTimestamp, the queue's order, has
// whole seconds. The names run against the order, so neither the names nor
// the informer's listing (by name) can pass for it. The first holds the
// clone slot before the next is made: on a loaded machine its reconcile
// can come after the next claim's, which would then take the free slot
// by right (nothing queued before it) and never queue.
func claimsInOrder(l *hypervisorlab.Lab, names ...string) {
	l.T.Helper()
	for i, n := range names {
		mc := claim(l, n)
		if i == 0 {
			eventually.True(l.T, 30*time.Second, "the first claim's clone running", func() bool { return cloneRunning(l) })
		}
		eventually.True(l.T, 5*time.Second, "the next second", func() bool {
			return time.Now().Truncate(time.Second).After(mc.CreationTimestamp.Time)
		})
	}
}

// cloneRunning reports whether the simulator runs a clone.
func cloneRunning(l *hypervisorlab.Lab) bool {
	for _, task := range l.Sim.Tasks() {
		if task.Type == "qmclone" && task.Running {
			return true
		}
	}
	return false
}

// waitQueued waits until each named claim waits for a clone slot.
func waitQueued(l *hypervisorlab.Lab, names ...string) {
	l.T.Helper()
	for _, n := range names {
		l.WaitReason(&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: n}}, "CloneQueued", 30*time.Second)
	}
}

// cloneOrder watches the claims' VMs appear on the simulator (a clone's
// config appears when it starts) and returns the claims in that order.
func cloneOrder(l *hypervisorlab.Lab, names ...string) []string {
	l.T.Helper()
	var order []string
	eventually.That(l.T, time.Minute, func() (bool, string) {
		for _, n := range names {
			if slices.Contains(order, n) {
				continue
			}
			mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: n}}
			if err := l.Get(mc); err != nil || mc.Status.VMID == nil {
				continue
			}
			if _, ok := l.Sim.VM(int(*mc.Status.VMID)); ok {
				order = append(order, n)
			}
		}
		return len(order) == len(names), fmt.Sprintf("cloned so far, in order: %v", order)
	})
	return order
}

// firstCloneRunning fails the test unless the simulator still runs a clone:
// the queue must have formed behind it for the test to say anything.
func firstCloneRunning(l *hypervisorlab.Lab) {
	l.T.Helper()
	if cloneRunning(l) {
		return
	}
	l.T.Fatal("the first clone ended before the others queued: the machine is too loaded for this test to show the order")
}

// One listing of a node's tasks serves every claim with a task on it:
// no claim asks for its own task's status, however many run.
func TestOneTaskListingPerNodeServesEveryClaim(t *testing.T) {
	startOperator(t)
	l := hypervisorlab.Proxmox(t)
	const n = 6
	for i := range n {
		claim(l, fmt.Sprintf("claim-%d", i))
	}
	for i := range n {
		l.WaitReason(&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i)}}, "MachineReady", time.Minute)
	}
	stats := l.Sim.Stats()
	tasks := 0
	for _, task := range l.Sim.Tasks() {
		if task.Type != "qmdestroy" {
			tasks++
		}
	}
	t.Logf("%d claims, %d tasks: %d task listings, %d task-status requests", n, tasks, stats[proxmoxsim.OpTaskList], stats[proxmoxsim.OpTaskStatus])
	if tasks < 3*n {
		t.Fatalf("%d tasks ran for %d claims, want a clone, a resize and a start each", tasks, n)
	}
	if stats[proxmoxsim.OpTaskStatus] != 0 {
		t.Errorf("%d task-status requests for %d claims: claims polled their own tasks", stats[proxmoxsim.OpTaskStatus], n)
	}
	if stats[proxmoxsim.OpTaskList] == 0 {
		t.Error("no node's task list was read, yet every task was seen to end")
	}
}

// With one clone slot, claims queued behind a running clone get the slot in
// the order they were made, each the moment the clone before it ends:
// the claims look again only after an hour (startOperator), so only the
// provider handing over the slot and waking the claim can move them.
func TestFreedCloneSlotGoesToTheLongestWaitingClaim(t *testing.T) {
	startOperator(t)
	// Long enough that the later claims queue behind it on a loaded
	// machine (6 s was not).
	l := hypervisorlab.Proxmox(t, oneCloneSlot(30*time.Second))
	want := []string{"claim-c", "claim-b", "claim-a"}
	claimsInOrder(l, want...)
	waitQueued(l, want[1:]...)
	admittedInOrder(t, l, "clones started", want)
}

// The queue's order is the API server's: a new manager, which knows
// nothing of the old one's queue, still hands the slot (freed by a clone the
// old one started) to the claims in the order they were made.
func TestANewManagerKeepsTheQueueOrder(t *testing.T) {
	stopFirst := startOperator(t)
	// Long enough that the queue is still there through a restart on a
	// loaded CI machine (10 s was not).
	l := hypervisorlab.Proxmox(t, oneCloneSlot(30*time.Second))
	want := []string{"claim-c", "claim-b", "claim-a"}
	claimsInOrder(l, want...)
	waitQueued(l, want[1:]...)
	stopFirst()
	startOperator(t)
	admittedInOrder(t, l, "after the restart clones started", want)
}

// admittedInOrder waits for the first clone, lets the queued ones run
// fast (they need not take as long), and checks that they were cloned in
// want's order and all turn Ready.
func admittedInOrder(t *testing.T, l *hypervisorlab.Lab, what string, want []string) {
	t.Helper()
	firstCloneRunning(l)
	lat := proxmoxsim.DefaultLatencies()
	lat.Clone = 300 * time.Millisecond
	l.Sim.SetLatencies(lat)
	if got := cloneOrder(l, want...); !slices.Equal(got, want) {
		t.Fatalf("%s in the order %v, want the claims' order %v", what, got, want)
	}
	for _, n := range want {
		l.WaitReason(&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: n}}, "MachineReady", time.Minute)
	}
}
