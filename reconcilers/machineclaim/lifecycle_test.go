package machineclaim_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
)

// The whole lifecycle: Pending → Provisioning → Running → Ready, then the
// timeout ends it: the VM is deleted and the claim Terminated.
func TestClaimLifecycleWithTimeout(t *testing.T) {
	l := newLab(t)
	l.claim("box", func(mc *hypervisorv1alpha1.MachineClaim) {
		mc.Spec.Timeout = &metav1.Duration{Duration: 4 * time.Second}
		mc.Spec.Hostname = "box"
	})
	mc := l.waitPhase("box", hypervisorv1alpha1.MachineReady, time.Minute)
	if mc.Status.VMID == nil || mc.Status.Node != "pve1" || len(mc.Status.Addresses) == 0 || mc.Status.ExpiryTime == nil ||
		!strings.HasPrefix(mc.Status.ProviderID, "proxmox://pve1/") || mc.Status.ReadyTime == nil || mc.Status.StartTime == nil {
		t.Fatalf("Ready claim status incomplete: %+v", mc.Status)
	}
	vms := l.OwnedVMs()
	if len(vms) != 1 || vms[0].VMID != int(*mc.Status.VMID) {
		t.Fatalf("want exactly the claim's VM, got %+v", vms)
	}
	vm := vms[0]
	if !slices.Contains(vm.Tags, "hf-owner-"+string(mc.UID)) || vm.Status != "running" || vm.Config["cores"] != "2" ||
		vm.Config["ciuser"] != "ubuntu" || !strings.Contains(vm.Config["scsi0"], "size=20G") || vm.Name != "box" {
		t.Errorf("VM not configured as the template says: %+v", vm)
	}
	if got := vm.Config["ipconfig0"]; got != "ip=dhcp" {
		t.Errorf("ipconfig0 = %q", got)
	}

	claimClock.Step(t, 4*time.Second) // the claim's timeout
	mc = l.waitPhase("box", hypervisorv1alpha1.MachineTerminated, 30*time.Second)
	if mc.Status.TerminationReason != "Expired" {
		t.Errorf("termination reason %q, want Expired", mc.Status.TerminationReason)
	}
	if _, ok := l.Sim.VM(vm.VMID); ok {
		t.Errorf("VM %d still exists after the claim expired", vm.VMID)
	}
	ready := apimeta.FindStatusCondition(mc.Status.Conditions, meta.ReadyCondition)
	// Ended as planned: Ready True (kstatus Current), as a completed Job.
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != "Expired" || apimeta.IsStatusConditionTrue(mc.Status.Conditions, meta.StalledCondition) {
		t.Errorf("a Terminated claim is Ready=True (Expired) and not Stalled: %v", mc.Status.Conditions)
	}

	// Deleting the claim now releases it at once: there is no machine left.
	if err := l.C.Delete(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 20*time.Second, func() (bool, string) {
		err := l.Get(mc)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// An ephemeral runner powers its VM off after its job: the claim notices,
// deletes the VM and ends Terminated/ShutDown.
func TestSelfShutdownIsDetectedAndCleanedUp(t *testing.T) {
	l := newLab(t)
	l.claim("runner")
	mc := l.waitPhase("runner", hypervisorv1alpha1.MachineReady, time.Minute)
	l.Sim.GuestShutdown(int(*mc.Status.VMID))
	mc = l.waitPhase("runner", hypervisorv1alpha1.MachineTerminated, 30*time.Second)
	if mc.Status.TerminationReason != "ShutDown" {
		t.Errorf("termination reason %q, want ShutDown", mc.Status.TerminationReason)
	}
	if n := len(l.OwnedVMs()); n != 0 {
		t.Errorf("%d VMs left after the self-shutdown", n)
	}
}

// A claim deleted while its clone is still running leaves nothing behind.
func TestDeleteDuringCloneLeavesNothing(t *testing.T) {
	l := newLab(t, func(o *proxmoxsim.Options, _ *hypervisorv1alpha1.HypervisorCluster) {
		o.Latencies = proxmoxsim.DefaultLatencies()
		o.Latencies.Clone = 3 * time.Second
	})
	mc := l.claim("doomed")
	eventually.That(t, 30*time.Second, func() (bool, string) {
		for _, vm := range l.Sim.VMs() {
			if vm.Lock == "clone" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no clone in flight; VMs %+v", l.Sim.VMs())
	})
	if err := l.C.Delete(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := l.Get(mc)
		return apierrors.IsNotFound(err), fmt.Sprintf("claim still there: %v", hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions))
	})
	for _, vm := range l.Sim.VMs() {
		if !vm.Template {
			t.Errorf("VM %d (%s, lock %q) left behind", vm.VMID, vm.Name, vm.Lock)
		}
	}
}

// Claims made after a credential rotation use the new token, without a
// restart. (The cluster's side of a rotation is tested in hypervisorcluster;
// here its reasons only tell when the operator has seen each step.)
func TestClaimsUseRotatedCredentials(t *testing.T) {
	l := newLab(t)
	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}
	l.WaitReason(cluster, "Connected", 30*time.Second)

	tokenID, _ := l.Sim.APIToken()
	l.Sim.SetAPIToken(tokenID, "rotated-secret-1")
	l.WaitReason(cluster, "AuthenticationFailed", 30*time.Second)

	l.UpdateToken("rotated-secret-1")
	l.WaitReason(cluster, "Connected", 30*time.Second)

	// Claims use the new credentials too.
	l.claim("after-rotation")
	l.waitPhase("after-rotation", hypervisorv1alpha1.MachineReady, time.Minute)
}

// A clone task that fails is retried, and the claim still gets its VM. (How
// a cluster reports and recovers from faults is tested in hypervisorcluster.)
func TestFailedCloneTaskIsRetried(t *testing.T) {
	l := newLab(t)
	if err := l.Sim.InjectFault(proxmoxsim.Fault{Path: `/clone$`, Action: proxmoxsim.FaultTaskFail, Times: 1,
		Message: "clone failed: storage full"}); err != nil {
		t.Fatal(err)
	}
	l.claim("retried")
	l.waitPhase("retried", hypervisorv1alpha1.MachineReady, time.Minute)
}

// A clone task that ends "WARNINGS: 1" is a success: the claim turns Ready
// on its first clone, and a Warning event says what Proxmox warned about.
func TestCloneWithWarningsIsReadyAndSaysSo(t *testing.T) {
	l := newLab(t)
	if err := l.Sim.InjectFault(proxmoxsim.Fault{Path: `/clone$`, Action: proxmoxsim.FaultTaskWarnings, Times: 1}); err != nil {
		t.Fatal(err)
	}
	l.claim("warned")
	l.waitPhase("warned", hypervisorv1alpha1.MachineReady, time.Minute)
	eventually.That(t, 10*time.Second, func() (bool, string) {
		var list eventsv1.EventList
		if err := l.C.List(context.Background(), &list, client.InNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Regarding.Name == "warned" && e.Reason == machineclaim.ReasonTaskWarnings && e.Type == corev1.EventTypeWarning &&
				strings.Contains(strings.ToLower(e.Note), "warnings: 1") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no %s event among %d", machineclaim.ReasonTaskWarnings, len(list.Items))
	})
	if vms := l.OwnedVMs(); len(vms) != 1 {
		t.Errorf("%d VMs for one claim whose clone warned; want 1", len(vms))
	}
}

// 50 claims at once, with Proxmox's storage lock in play: all Ready, one VM
// each, no VMID shared.
func TestFiftyClaimsAtOnce(t *testing.T) {
	l := newLab(t)
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.claim(fmt.Sprintf("burst-%02d", i))
		}()
	}
	wg.Wait()
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		if err := l.C.List(context.Background(), &list, inNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, mc := range list.Items {
			if mc.Status.Phase == hypervisorv1alpha1.MachineReady {
				ready++
			}
		}
		return ready == n, fmt.Sprintf("%d of %d Ready", ready, n)
	})
	var list hypervisorv1alpha1.MachineClaimList
	if err := l.C.List(context.Background(), &list, inNamespace(l.NS)); err != nil {
		t.Fatal(err)
	}
	vmids := map[int32]string{}
	for _, mc := range list.Items {
		if other, dup := vmids[*mc.Status.VMID]; dup {
			t.Errorf("claims %s and %s share VMID %d", other, mc.Name, *mc.Status.VMID)
		}
		vmids[*mc.Status.VMID] = mc.Name
	}
	owners := map[string]int{}
	for _, vm := range l.OwnedVMs() {
		for _, tag := range vm.Tags {
			if strings.HasPrefix(tag, "hf-owner-") {
				owners[tag]++
			}
		}
	}
	if len(l.OwnedVMs()) != n || len(owners) != n {
		t.Errorf("%d VMs for %d owners; want %d of each (no twins)", len(l.OwnedVMs()), len(owners), n)
	}
}
