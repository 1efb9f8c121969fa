package machineclaim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
)

// withBoot makes the simulated guests take boot to report an address.
func withBoot(boot time.Duration) hypervisorlab.Option {
	return func(o *proxmoxsim.Options, _ *hypervisorv1alpha1.HypervisorCluster) {
		o.Latencies = proxmoxsim.DefaultLatencies()
		o.Latencies.Boot = boot
	}
}

// A guest that reports its address within the grace takes its claim from
// Provisioning straight to Ready: every status the claim ever had is seen
// through a watch, and none is Running. startTime is still when the
// machine was first seen running, not when it became Ready.
func TestNormalBootWritesNoRunningPhase(t *testing.T) {
	l := newLab(t, withBoot(3*time.Second))
	wc, err := client.NewWithWatch(testenv.Config(), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := wc.Watch(ctx, &hypervisorv1alpha1.MachineClaimList{}, client.InNamespace(l.NS))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	l.claim("box")
	var (
		phases []hypervisorv1alpha1.MachinePhase
		ready  *hypervisorv1alpha1.MachineClaim
	)
	deadline := time.After(time.Minute)
	for ready == nil {
		select {
		case ev := <-w.ResultChan():
			mc, ok := ev.Object.(*hypervisorv1alpha1.MachineClaim)
			if !ok {
				t.Fatalf("watch: %v", ev.Object)
			}
			if n := len(phases); n == 0 || phases[n-1] != mc.Status.Phase {
				phases = append(phases, mc.Status.Phase)
			}
			if mc.Status.Phase == hypervisorv1alpha1.MachineReady {
				ready = mc
			}
		case <-deadline:
			t.Fatalf("not Ready within a minute; phases seen %v", phases)
		}
	}
	for _, p := range phases {
		if p == hypervisorv1alpha1.MachineRunning {
			t.Errorf("a boot within the grace was written as Running: phases %v", phases)
		}
	}
	st := ready.Status
	if st.StartTime == nil || st.ReadyTime == nil || st.ReadyTime.Sub(st.StartTime.Time) < time.Second {
		t.Errorf("startTime %v, readyTime %v: want startTime when the machine was first seen running, a 3 s boot before Ready",
			st.StartTime, st.ReadyTime)
	}
}

// A guest silent past the grace is written as Running, with a reason and
// message that say what to check, and an event; it is shown as being made
// until then.
func TestSilentGuestTurnsRunningAfterTheGrace(t *testing.T) {
	l := newLab(t, withBoot(time.Hour))
	l.claim("quiet")
	eventually.That(t, 30*time.Second, func() (bool, string) {
		for _, vm := range l.Sim.VMs() {
			if !vm.Template && vm.Status == "running" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no VM running: %+v", l.Sim.VMs())
	})
	// Several address polls (a second each) pass: none writes Running.
	time.Sleep(3 * time.Second)
	mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}}
	if err := l.Get(mc); err != nil {
		t.Fatal(err)
	}
	if mc.Status.Phase != hypervisorv1alpha1.MachineProvisioning || mc.Status.StartTime != nil {
		t.Fatalf("within the grace: phase %s, startTime %v; want Provisioning, unset", mc.Status.Phase, mc.Status.StartTime)
	}

	claimClock.Step(t, machineclaim.AddressGrace)
	mc = l.waitPhase("quiet", hypervisorv1alpha1.MachineRunning, 30*time.Second)
	ready := apimeta.FindStatusCondition(mc.Status.Conditions, meta.ReadyCondition)
	if ready == nil || ready.Reason != "WaitingForAddress" || mc.Status.StartTime == nil || mc.Status.Node == "" {
		t.Fatalf("past the grace: %+v", mc.Status)
	}
	if !strings.Contains(ready.Message, "guest agent") {
		t.Errorf("message %q does not say what to check", ready.Message)
	}
	if !mc.Status.StartTime.Time.Before(claimClock.Now().Add(-machineclaim.AddressGrace + time.Second)) {
		t.Errorf("startTime %v is not when the machine was first seen running (now %v)", mc.Status.StartTime, claimClock.Now())
	}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		var list eventsv1.EventList
		if err := l.C.List(context.Background(), &list, client.InNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Regarding.Name == "quiet" && e.Reason == string(hypervisorv1alpha1.MachineRunning) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no Running event among %d", len(list.Items))
	})
}
