package cyberdesk_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
)

// claimOf is the desk's own MachineClaim, named after it.
func (l *lab) claimOf(desk string) *hypervisorv1alpha1.MachineClaim {
	l.t.Helper()
	c := &hypervisorv1alpha1.MachineClaim{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: desk}, c); err != nil {
		l.t.Fatalf("the desk's MachineClaim %s: %v", desk, err)
	}
	return c
}

// A desk's VM is its claim's machine: the claim is the desk's, names the
// desk as what it is made from, and goes with the desk, taking the VM.
func TestDeskOwnsOneClaimThatGoesWithIt(t *testing.T) {
	l := newLab(t)
	l.desk("frank", 600000)
	d := l.waitPhase("frank", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
	c := l.claimOf("frank")
	if !metav1.IsControlledBy(c, d) || c.Spec.TemplateRef.Kind != "Cyberdesk" || c.Spec.TemplateRef.Name != "frank" || c.Spec.MachineName != "cyberdesk-frank" {
		t.Fatalf("claim %s: owners %v, templateRef %+v, machineName %q", c.Name, c.OwnerReferences, c.Spec.TemplateRef, c.Spec.MachineName)
	}
	if c.Spec.Timeout == nil || c.Spec.Timeout.Duration > 600*time.Second {
		t.Errorf("claim timeout %v, want at most the desk's timeoutMs", c.Spec.Timeout)
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-frank"}, vm); err != nil {
		t.Fatal(err)
	}
	if vm.Labels[kubevirt.LabelOwnerUID] != string(c.UID) {
		t.Errorf("VM owner %q, want the claim %s", vm.Labels[kubevirt.LabelOwnerUID], c.UID)
	}
	if err := l.c.Delete(rootCtx, d); err != nil {
		t.Fatal(err)
	}
	l.waitGone(d, 30*time.Second)
	l.waitGone(c, 10*time.Second)
	l.nothingLeft("frank", 10*time.Second)
}

// A VM whose desk's claim was removed outside HyperFleet, without its
// finalizer, is left to nobody: the desk ends, saying so, and the orphan
// sweeper deletes the VM, as it does any claim's.
func TestVMOfAClaimDeletedOutsideIsSwept(t *testing.T) {
	l := newLab(t)
	l.desk("grace", 600000)
	l.waitPhase("grace", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
	c := l.claimOf("grace")
	if err := l.c.Patch(rootCtx, c, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	if err := l.c.Delete(rootCtx, c); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	d := l.waitPhase("grace", cyberdeskv1alpha1.CyberdeskTerminated, 30*time.Second)
	if reason, _ := readyReason(d); reason != "VMDeletedOutside" {
		t.Errorf("Ready reason %q, want VMDeletedOutside", reason)
	}
	l.nothingLeft("grace", orphanGrace+30*time.Second)
}

// A desk whose VM was made before desks had claims (by the Kopf operator's
// successor, owned by the desk itself) keeps that VM across the upgrade:
// its new claim takes the VM over rather than refusing its name, the desk
// keeps its start, and the timeout still ends it.
func TestVMMadeForTheDeskItselfIsHandedToItsClaim(t *testing.T) {
	l := newLab(t)
	mgrMu.Lock()
	stopMgr()
	restarted := false
	defer func() {
		if !restarted {
			if err := startManager(); err != nil {
				t.Error(err)
			}
		}
		mgrMu.Unlock()
	}()

	d := l.desk("hank", 60000)
	ns := &corev1.Namespace{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Name: operatorNamespace}, ns); err != nil {
		t.Fatal(err)
	}
	legacy, err := kubevirt.New(kubevirt.Config{Client: l.c, Reader: l.c, OwnerKind: "Cyberdesk", ManagedBy: "cyberdesk-operator", Installation: string(ns.UID)})
	if err != nil {
		t.Fatal(err)
	}
	ref := providers.MachineRef{Name: "cyberdesk-hank", Namespace: l.ns}
	owner := providers.Owner{UID: string(d.UID), Namespace: l.ns, Name: "hank"}
	eventually.That(t, time.Minute, func() (bool, string) {
		m, err := legacy.Create(rootCtx, providers.MachineSpec{Ref: ref, Owner: owner,
			CloudInit: providers.CloudInitSpec{UserData: d.Spec.UserData},
			KubeVirt:  &providers.KubeVirtSpec{Template: []byte(templateText(t)), TemplateSource: "test", Variables: machinespec.Variables("hank")}})
		return err == nil && m.State == providers.PowerRunning, fmt.Sprintf("legacy VM: %v %s", err, m.State)
	})
	vm := &kubevirtv1.VirtualMachine{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-hank"}, vm); err != nil {
		t.Fatal(err)
	}
	// The status the desk had then: running on that VM since a while ago.
	start := metav1.NewTime(fakeClock.Now().Add(-10 * time.Second).Truncate(time.Second))
	d.Status = cyberdeskv1alpha1.CyberdeskStatus{Phase: cyberdeskv1alpha1.CyberdeskRunning, StartTime: &start,
		VirtualMachineRef: &cyberdeskv1alpha1.VirtualMachineReference{Name: "cyberdesk-hank", Namespace: l.ns, UID: string(vm.UID)}}
	if err := l.c.Status().Update(rootCtx, d); err != nil {
		t.Fatal(err)
	}
	d.Finalizers = []string{"cyberdesk.io/vm-cleanup"}
	if err := l.c.Update(rootCtx, d); err != nil {
		t.Fatal(err)
	}

	restarted = true
	if err := startManager(); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		c := &hypervisorv1alpha1.MachineClaim{}
		if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "hank"}, c); err != nil {
			return false, err.Error()
		}
		got := &kubevirtv1.VirtualMachine{}
		if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-hank"}, got); err != nil {
			return false, err.Error()
		}
		return got.UID == vm.UID && got.Labels[kubevirt.LabelOwnerUID] == string(c.UID) && c.Status.Phase == hypervisorv1alpha1.MachineReady,
			fmt.Sprintf("VM %s owned by %s; claim %s %s", got.UID, got.Labels[kubevirt.LabelOwnerUID], c.UID, c.Status.Phase)
	})
	d = l.waitPhase("hank", cyberdeskv1alpha1.CyberdeskRunning, 10*time.Second)
	if !d.Status.StartTime.Equal(&start) || d.Status.VirtualMachineRef.UID != string(vm.UID) {
		t.Errorf("desk start %v, VM %s: want the start and VM it had (%v, %s)", d.Status.StartTime, d.Status.VirtualMachineRef.UID, start, vm.UID)
	}
	fakeClock.SetTime(d.Status.ExpiryTime.Time)
	l.waitPhase("hank", cyberdeskv1alpha1.CyberdeskTerminated, 30*time.Second)
	l.nothingLeft("hank", 10*time.Second)
}

// A VM of the desk's VM name that is somebody else's is never taken over:
// the desk waits, saying whose name it is, and the VM is left as it was.
func TestSomebodyElsesVMOfTheDesksNameIsLeftAlone(t *testing.T) {
	l := newLab(t)
	other := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "cyberdesk-ivan", Namespace: l.ns, Labels: map[string]string{"owner": "someone"}},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
	if err := l.c.Create(rootCtx, other); err != nil {
		t.Fatal(err)
	}
	l.desk("ivan", 600000)
	var d *cyberdeskv1alpha1.Cyberdesk
	eventually.That(t, 30*time.Second, func() (bool, string) {
		var err error
		if d, err = l.get("ivan"); err != nil {
			return false, err.Error()
		}
		reason, msg := readyReason(d)
		return reason == "VMNameTaken" && strings.Contains(msg, "cyberdesk-ivan") && d.Status.Phase == cyberdeskv1alpha1.CyberdeskPending, describe(d)
	})
	got := &kubevirtv1.VirtualMachine{}
	if err := l.c.Get(rootCtx, client.ObjectKeyFromObject(other), got); err != nil {
		t.Fatal(err)
	}
	if got.UID != other.UID || got.Labels[kubevirt.LabelOwnerUID] != "" || got.Labels["owner"] != "someone" {
		t.Errorf("somebody else's VM was changed: labels %v", got.Labels)
	}
	if err := l.c.Delete(rootCtx, d); err != nil {
		t.Fatal(err)
	}
	l.waitGone(d, 30*time.Second)
	if err := l.c.Get(rootCtx, client.ObjectKeyFromObject(other), got); err != nil {
		t.Errorf("deleting the desk took somebody else's VM: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
