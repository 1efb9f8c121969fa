package cyberdesk_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

func TestDesktopRunsTimesOutAndIsCleanedUp(t *testing.T) {
	l := newLab(t)
	created, deleted, timedOut := metric(t, "cyberdesk_vm_created_total"), metric(t, "cyberdesk_vm_deleted_total"), metric(t, "cyberdesk_vm_timeout_total")
	l.desk("alice", 4000)

	d := l.waitPhase("alice", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
	ref := d.Status.VirtualMachineRef
	if ref == nil || ref.Name != "cyberdesk-alice" || ref.Namespace != l.ns || ref.UID == "" {
		t.Fatalf("virtualMachineRef = %+v", ref)
	}
	if d.Status.StartTime == nil || d.Status.ExpiryTime == nil || d.Status.ExpiryTime.Sub(d.Status.StartTime.Time) != 4*time.Second {
		t.Fatalf("startTime %v expiryTime %v: want expiry = start + 4s", d.Status.StartTime, d.Status.ExpiryTime)
	}
	if reason, _ := readyReason(d); reason != "Running" || d.Status.ObservedGeneration != d.Generation {
		t.Fatalf("Ready reason %q, observedGeneration %d/%d", reason, d.Status.ObservedGeneration, d.Generation)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		d, _ = l.get("alice")
		return d.Status.IPAddress != "" && d.Status.NodeName != "", "no IP or node yet: " + describe(d)
	})

	// The VM carries the template's variables, and the user data sits in
	// the Secret, never in the VM.
	vm := &kubevirtv1.VirtualMachine{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-alice"}, vm); err != nil {
		t.Fatal(err)
	}
	if vm.Labels["cyberdesk.io/name"] != "alice" || vm.Labels["app.kubernetes.io/managed-by"] != "cyberdesk-operator" {
		t.Errorf("VM labels = %v", vm.Labels)
	}
	secret := &corev1.Secret{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-alice-cloudinit"}, secret); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(secret.Data[kubevirt.UserDataKey]), "name: alice") {
		t.Errorf("cloud-init Secret holds %q", secret.Data[kubevirt.UserDataKey])
	}
	if len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].UID != vm.UID {
		t.Errorf("the Secret is not owned by the VM: %+v", secret.OwnerReferences)
	}

	// At expiry the desk ends within seconds, and takes its VM with it.
	// The operator's clock is stepped to the expiry rather than waited on;
	// lateness is the real time from then until the desk has ended.
	fakeClock.SetTime(d.Status.ExpiryTime.Time)
	expired := time.Now()
	d = l.waitPhase("alice", cyberdeskv1alpha1.CyberdeskTerminated, 30*time.Second)
	if reason, msg := readyReason(d); reason != "TimedOut" || !strings.Contains(msg, "deleted") {
		t.Errorf("Ready = %s: %s", reason, msg)
	}
	ended := time.Now()
	if late := ended.Sub(expired); late > 10*time.Second {
		t.Errorf("the desk ended %s after its expiry; the timeout must act within seconds", late)
	}
	l.nothingLeft("alice", 10*time.Second)
	if got := metric(t, "cyberdesk_vm_created_total") - created; got != 1 {
		t.Errorf("cyberdesk_vm_created_total grew by %v, want 1", got)
	}
	if got := metric(t, "cyberdesk_vm_timeout_total") - timedOut; got != 1 {
		t.Errorf("cyberdesk_vm_timeout_total grew by %v, want 1", got)
	}
	if got := metric(t, "cyberdesk_vm_deleted_total") - deleted; got != 1 {
		t.Errorf("cyberdesk_vm_deleted_total grew by %v, want 1", got)
	}

	// The export reached Supabase with the final status.
	eventually.That(t, 15*time.Second, func() (bool, string) {
		row, ok := supa.row(l.ns, "alice")
		return ok && row.Status == "terminated" && row.VMName == "cyberdesk-alice", fmt.Sprintf("row %+v (found %v)", row, ok)
	})

	// Deleting the ended desk releases it at once.
	if err := l.c.Delete(rootCtx, d); err != nil {
		t.Fatal(err)
	}
	l.waitGone(d, 10*time.Second)
}

func TestDeletedMidBootLeavesNothing(t *testing.T) {
	l := newLab(t)
	sim.HangScheduling(l.ns, "cyberdesk-bob")
	defer sim.ReleaseScheduling(l.ns, "cyberdesk-bob")
	l.desk("bob", 600000)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-bob"}, vmi)
		return err == nil && vmi.Status.Phase == kubevirtv1.Scheduling, fmt.Sprintf("instance: %v %s", err, vmi.Status.Phase)
	})
	d := l.waitPhase("bob", cyberdeskv1alpha1.CyberdeskProvisioning, 10*time.Second)
	if err := l.c.Delete(rootCtx, d); err != nil {
		t.Fatal(err)
	}
	l.waitGone(d, 30*time.Second)
	l.nothingLeft("bob", 5*time.Second)
}

func TestGuestShutdownEndsTheDesk(t *testing.T) {
	l := newLab(t)
	l.desk("carol", 600000)
	l.waitPhase("carol", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
	if err := sim.GuestShutdown(l.ns, "cyberdesk-carol"); err != nil {
		t.Fatal(err)
	}
	d := l.waitPhase("carol", cyberdeskv1alpha1.CyberdeskTerminated, 30*time.Second)
	if reason, _ := readyReason(d); reason != "GuestShutdown" {
		t.Errorf("Ready reason = %s, want GuestShutdown", reason)
	}
	l.nothingLeft("carol", 10*time.Second)
}

func TestTemplateEditedBetweenTwoDesktops(t *testing.T) {
	l := newLab(t)
	defer func() {
		if err := resetTemplate(rootCtx); err != nil {
			t.Fatal(err)
		}
	}()
	l.desk("first", 600000)
	l.waitPhase("first", cyberdeskv1alpha1.CyberdeskProvisioning, 30*time.Second)

	edited := strings.Replace(templateText(t), "cores: 2", "cores: 6", 1)
	edited = strings.Replace(edited, "\n    app: cyberdesk\n", "\n    app: cyberdesk\n    edition: second\n", 1)
	if err := setTemplate(rootCtx, edited); err != nil {
		t.Fatal(err)
	}
	l.desk("second", 600000)
	l.waitPhase("second", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)

	cores := func(name string) (uint32, string) {
		vm := &kubevirtv1.VirtualMachine{}
		if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: name}, vm); err != nil {
			t.Fatal(err)
		}
		return vm.Spec.Template.Spec.Domain.CPU.Cores, vm.Labels["edition"]
	}
	if c, ed := cores("cyberdesk-first"); c != 2 || ed != "" {
		t.Errorf("first desk's VM: %d cores, edition %q; want the template as it was (2, none)", c, ed)
	}
	if c, ed := cores("cyberdesk-second"); c != 6 || ed != "second" {
		t.Errorf("second desk's VM: %d cores, edition %q; want the edited template (6, second)", c, ed)
	}
}

func TestUnknownTemplateVariableIsAClearCondition(t *testing.T) {
	l := newLab(t)
	defer func() {
		if err := resetTemplate(rootCtx); err != nil {
			t.Fatal(err)
		}
	}()
	if err := setTemplate(rootCtx, strings.Replace(templateText(t), "${cyberdesk_name}", "${desk_owner}", 1)); err != nil {
		t.Fatal(err)
	}
	l.desk("dave", 600000)
	var d *cyberdeskv1alpha1.Cyberdesk
	eventually.That(t, 30*time.Second, func() (bool, string) {
		d, _ = l.get("dave")
		reason, msg := readyReason(d)
		return reason == "TemplateInvalid" && strings.Contains(msg, "${desk_owner}") && strings.Contains(msg, "cyberdesk-vm-template"), describe(d)
	})
	if !stalled(d) || d.Status.Phase != cyberdeskv1alpha1.CyberdeskPending {
		t.Errorf("want Stalled=True in phase Pending: %s", describe(d))
	}
	if len(l.vms()) != 0 {
		t.Error("a VM was made from a broken template")
	}
	// Fixed template: the desk goes on (a spec change nudges it at once).
	if err := resetTemplate(rootCtx); err != nil {
		t.Fatal(err)
	}
	d.Spec.TimeoutMs = 700000
	if err := l.c.Update(rootCtx, d); err != nil {
		t.Fatal(err)
	}
	l.waitPhase("dave", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
}

func TestHundredDesktopsAtOnce(t *testing.T) {
	l := newLab(t)
	const n = 100
	created := metric(t, "cyberdesk_vm_created_total")
	for i := range n {
		l.desk(fmt.Sprintf("desk-%03d", i), 3600000)
	}
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		var list cyberdeskv1alpha1.CyberdeskList
		if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns)); err != nil {
			return false, err.Error()
		}
		running, other := 0, ""
		for _, d := range list.Items {
			if d.Status.Phase == cyberdeskv1alpha1.CyberdeskRunning {
				running++
			} else if other == "" {
				other = d.Name + ": " + describe(&d)
			}
		}
		return running == n, fmt.Sprintf("%d of %d Running; e.g. %s", running, n, other)
	})
	if vms := l.vms(); len(vms) != n {
		t.Errorf("%d VMs for %d desks", len(vms), n)
	}
	if got := metric(t, "cyberdesk_vm_created_total") - created; got != n {
		t.Errorf("cyberdesk_vm_created_total grew by %v, want %d", got, n)
	}
	if active := metric(t, "cyberdesk_active_vm_count"); active < n {
		t.Errorf("cyberdesk_active_vm_count = %v, want at least %d", active, n)
	}
	if err := l.c.DeleteAllOf(rootCtx, &cyberdeskv1alpha1.Cyberdesk{}, client.InNamespace(l.ns)); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		var list cyberdeskv1alpha1.CyberdeskList
		if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns)); err != nil {
			return false, err.Error()
		}
		vms := l.vms()
		return len(list.Items) == 0 && len(vms) == 0, fmt.Sprintf("%d desks and %d VMs left", len(list.Items), len(vms))
	})
	var secrets corev1.SecretList
	if err := l.c.List(rootCtx, &secrets, client.InNamespace(l.ns), client.MatchingLabels{kubevirt.LabelOwnerKind: "Cyberdesk"}); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d cloud-init Secrets left", len(secrets.Items))
	}
}

func TestRestartMidLifecycleMakesNoDuplicates(t *testing.T) {
	l := newLab(t)
	const n = 10
	created := metric(t, "cyberdesk_vm_created_total")
	for i := range n {
		l.desk(fmt.Sprintf("r-%02d", i), 3600000)
	}
	// Stop the operator while the desks are being made.
	eventually.That(t, 30*time.Second, func() (bool, string) {
		return len(l.vms()) >= n/2, fmt.Sprintf("%d VMs so far", len(l.vms()))
	})
	mgrMu.Lock()
	stopMgr()
	if err := startManager(); err != nil {
		mgrMu.Unlock()
		t.Fatal(err)
	}
	mgrMu.Unlock()
	for i := range n {
		d := l.waitPhase(fmt.Sprintf("r-%02d", i), cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
		vm := &kubevirtv1.VirtualMachine{}
		if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: d.Status.VirtualMachineRef.Name}, vm); err != nil {
			t.Fatal(err)
		}
		if string(vm.UID) != d.Status.VirtualMachineRef.UID {
			t.Errorf("desk %s records VM UID %s, the VM has %s", d.Name, d.Status.VirtualMachineRef.UID, vm.UID)
		}
	}
	if vms := l.vms(); len(vms) != n {
		t.Errorf("%d VMs for %d desks after the restart", len(vms), n)
	}
	// A create in flight when the operator stops may finish on the API
	// server unanswered, and the restarted operator finds that VM rather
	// than making it: a crash can lose a count, never add one.
	if got := metric(t, "cyberdesk_vm_created_total") - created; got > n || got < n/2 {
		t.Errorf("cyberdesk_vm_created_total grew by %v across the restart, want between %d and %d", got, n/2, n)
	}
}

func TestFailedInstanceIsRestartedByItsRunStrategy(t *testing.T) {
	l := newLab(t)
	l.desk("erin", 600000)
	first := l.waitPhase("erin", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
	if err := sim.FailVMI(l.ns, "cyberdesk-erin"); err != nil {
		t.Fatal(err)
	}
	// RerunOnFailure: KubeVirt starts a new instance; the desk keeps its
	// start time (the timeout counts from the first start) and runs again.
	eventually.That(t, time.Minute, func() (bool, string) {
		d, _ := l.get("erin")
		vmi := &kubevirtv1.VirtualMachineInstance{}
		err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-erin"}, vmi)
		return err == nil && vmi.Status.Phase == kubevirtv1.Running && d.Status.Phase == cyberdeskv1alpha1.CyberdeskRunning &&
				d.Status.StartTime.Equal(first.Status.StartTime),
			fmt.Sprintf("instance %v %s; desk %s", err, vmi.Status.Phase, describe(d))
	})
}

func stalled(d *cyberdeskv1alpha1.Cyberdesk) bool {
	for _, c := range d.Status.Conditions {
		if c.Type == "Stalled" {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}
