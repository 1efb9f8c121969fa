package cyberdesk_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/reconcilers/cyberdesk"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// withDeskStandby restarts the operator keeping hot desk machines as hot
// says, and puts the suite's operator back when the test ends.
func withDeskStandby(t *testing.T, hot map[string]int32) {
	t.Helper()
	restart := func(s cyberdesk.Standby) {
		mgrMu.Lock()
		defer mgrMu.Unlock()
		stopMgr()
		mgrOpts.Cyberdesk.Standby = s
		if err := startManager(); err != nil {
			t.Fatal(err)
		}
	}
	// A long age limit: other tests step the operator's clock forward.
	restart(cyberdesk.Standby{Hot: hot, MaxAge: 30 * 24 * time.Hour})
	t.Cleanup(func() { restart(cyberdesk.Standby{}) })
}

// deskStandby lists a namespace's hot desk machines' claims.
func (l *lab) deskStandby() []hypervisorv1alpha1.MachineClaim {
	l.t.Helper()
	var list hypervisorv1alpha1.MachineClaimList
	if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns), client.MatchingLabels{standby.TemplateLabel: cyberdesk.StandbyTemplate}); err != nil {
		l.t.Fatal(err)
	}
	return list.Items
}

// waitHot waits for n hot desk machines in the lab's namespace and returns
// their VM names.
func (l *lab) waitHot(n int) map[string]bool {
	l.t.Helper()
	names := map[string]bool{}
	eventually.That(l.t, time.Minute, func() (bool, string) {
		clear(names)
		for _, sb := range l.deskStandby() {
			if _, bound := standby.BoundTo(&sb); !bound && sb.Status.Phase == hypervisorv1alpha1.MachineReady {
				names[sb.Status.MachineName] = true
			}
		}
		return len(names) == n, fmt.Sprintf("%d hot desk machines, want %d", len(names), n)
	})
	return names
}

// A namespace the platform keeps hot desk machines in: a desk with no user
// data of its own takes one and runs at once, its status naming that VM;
// the keeper refills; a desk with user data makes its own VM; deleting the
// desk deletes the VM it took. A namespace without standby gets none, and a
// standby claim labelled there by hand is removed.
func TestDeskWithoutUserDataTakesAHotMachine(t *testing.T) {
	l, other := newLab(t), newLab(t)
	withDeskStandby(t, map[string]int32{l.ns: 1})
	hot := l.waitHot(1)

	l.desk("quick", 600000, func(d *cyberdeskv1alpha1.Cyberdesk) { d.Spec.UserData = "" })
	d := l.waitPhase("quick", cyberdeskv1alpha1.CyberdeskRunning, 30*time.Second)
	ref := d.Status.VirtualMachineRef
	if ref == nil || !hot[ref.Name] {
		t.Fatalf("desk runs VM %+v, want the hot machine %v", ref, hot)
	}
	c := l.claimOf("quick")
	if c.Spec.MachineName != "" || c.Status.MachineName != ref.Name {
		t.Errorf("claim asks for machine %q and holds %q, want none and %s", c.Spec.MachineName, c.Status.MachineName, ref.Name)
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: ref.Name}, vm); err != nil {
		t.Fatal(err)
	}
	if vm.Labels[kubevirt.LabelOwnerUID] != string(c.UID) || string(vm.UID) != ref.UID {
		t.Errorf("VM %s: owner %q (want the desk's claim %s), UID %s (desk records %s)", vm.Name, vm.Labels[kubevirt.LabelOwnerUID], c.UID, vm.UID, ref.UID)
	}
	if d.Status.StartTime == nil || d.Status.ExpiryTime == nil {
		t.Errorf("desk start %v, expiry %v", d.Status.StartTime, d.Status.ExpiryTime)
	}
	// Refilled with a new machine.
	for name := range l.waitHot(1) {
		if name == ref.Name {
			t.Errorf("the taken VM %s is counted hot again", name)
		}
	}
	if n := metric(t, "cyberdesk_standby_vm_count"); n < 1 {
		t.Errorf("cyberdesk_standby_vm_count sums to %v with a hot machine kept", n)
	}

	// Its own user data: its own VM, by the desk's name.
	l.desk("mine", 600000)
	if d := l.waitPhase("mine", cyberdeskv1alpha1.CyberdeskRunning, time.Minute); d.Status.VirtualMachineRef.Name != "cyberdesk-mine" {
		t.Errorf("a desk with user data runs %s, want its own cyberdesk-mine", d.Status.VirtualMachineRef.Name)
	}

	// Deleting the desk deletes the VM it took.
	if err := l.c.Delete(rootCtx, d); err != nil {
		t.Fatal(err)
	}
	l.waitGone(d, 30*time.Second)
	l.waitGone(&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: ref.Name}}, 30*time.Second)

	// Another team's namespace keeps none: its desk makes its own VM, and a
	// standby claim labelled there by hand is deleted, never made into a VM
	// for long.
	other.desk("elsewhere", 600000, func(d *cyberdeskv1alpha1.Cyberdesk) { d.Spec.UserData = "" })
	if d := other.waitPhase("elsewhere", cyberdeskv1alpha1.CyberdeskRunning, time.Minute); d.Status.VirtualMachineRef.Name != "cyberdesk-elsewhere" {
		t.Errorf("a desk in a namespace without standby runs %s, want its own", d.Status.VirtualMachineRef.Name)
	}
	forged := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: other.ns, Name: "forged",
			Labels: map[string]string{standby.TemplateLabel: cyberdesk.StandbyTemplate}},
		Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{
			APIGroup: cyberdeskv1alpha1.GroupVersion.Group, Kind: cyberdesk.OwnerKind, Name: cyberdesk.StandbyTemplate}},
	}
	if err := other.c.Create(rootCtx, forged); err != nil {
		t.Fatal(err)
	}
	other.waitGone(forged, 30*time.Second)
	if n := len(other.deskStandby()); n != 0 {
		t.Errorf("%d desk standby claims in a namespace the operator keeps none in", n)
	}
	var events corev1.EventList
	if err := l.c.List(rootCtx, &events, client.InNamespace(l.ns)); err != nil {
		t.Fatal(err)
	}
	took := false
	for _, e := range events.Items {
		took = took || e.Reason == "VMCreated" && e.InvolvedObject.Name == "quick"
	}
	if !took {
		t.Error("no VMCreated event on the desk that took a hot machine")
	}
}
