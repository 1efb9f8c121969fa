package machineclaim_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// keepHot sets the lab template's spec.standby.hot and waits until that
// many standby claims are Ready and the template counts them; it returns
// them.
func (l *lab) keepHot(n int32) []hypervisorv1alpha1.MachineClaim {
	l.T.Helper()
	ctx := context.Background()
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}}
	if err := l.Get(tmpl); err != nil {
		l.T.Fatal(err)
	}
	patch := client.MergeFrom(tmpl.DeepCopy())
	tmpl.Spec.Standby = &hypervisorv1alpha1.StandbySpec{Hot: n}
	if err := l.C.Patch(ctx, tmpl, patch); err != nil {
		l.T.Fatal(err)
	}
	var hot []hypervisorv1alpha1.MachineClaim
	eventually.That(l.T, time.Minute, func() (bool, string) {
		hot = l.standbyClaims()
		ready := 0
		for _, sb := range hot {
			if sb.Status.Phase == hypervisorv1alpha1.MachineReady {
				ready++
			}
		}
		if err := l.Get(tmpl); err != nil {
			return false, err.Error()
		}
		counted := tmpl.Status.Standby != nil && tmpl.Status.Standby.Hot == n
		return ready == int(n) && len(hot) == int(n) && counted, fmt.Sprintf("%d of %d standby claims Ready; template says %+v", ready, len(hot), tmpl.Status.Standby)
	})
	return hot
}

// standbyClaims are the lab template's standby claims.
func (l *lab) standbyClaims() []hypervisorv1alpha1.MachineClaim {
	l.T.Helper()
	var list hypervisorv1alpha1.MachineClaimList
	if err := l.C.List(context.Background(), &list, client.InNamespace(l.NS), client.MatchingLabels{standby.TemplateLabel: "ubuntu"}); err != nil {
		l.T.Fatal(err)
	}
	return list.Items
}

func machines(claims []hypervisorv1alpha1.MachineClaim) []string {
	out := make([]string, 0, len(claims))
	for _, c := range claims {
		out = append(out, c.Status.MachineName)
	}
	return out
}

func TestClaimTakesAHotStandbyMachineInsteadOfCloning(t *testing.T) {
	l := newLab(t)
	hot := l.keepHot(2)
	hotVMIDs := map[int32]string{}
	for _, sb := range hot {
		hotVMIDs[*sb.Status.VMID] = string(sb.UID)
	}

	l.claim("app")
	app := l.waitPhase("app", hypervisorv1alpha1.MachineReady, 30*time.Second)
	from, ok := hotVMIDs[*app.Status.VMID]
	if !ok {
		t.Fatalf("claim app made VM %d; want one of the standby machines %v", *app.Status.VMID, hotVMIDs)
	}
	vm, found := l.Sim.VM(int(*app.Status.VMID))
	if !found {
		t.Fatalf("VM %d is gone", *app.Status.VMID)
	}
	if !slices.Contains(vm.Tags, "hf-owner-"+string(app.UID)) || slices.Contains(vm.Tags, "hf-owner-"+from) ||
		!strings.Contains(vm.Description, "hyperfleet-owner-uid: "+string(app.UID)) || !strings.Contains(vm.Description, "/app\n") {
		t.Errorf("the machine's owner marks are not claim app's alone: tags %v, description %q", vm.Tags, vm.Description)
	}
	if app.Status.BoundFrom != nil || app.Status.ReadyTime == nil || len(app.Status.Addresses) == 0 {
		t.Errorf("claim app's status after the hand-over: %+v", app.Status)
	}
	// The standby claim it came from is gone, and another takes its place.
	eventually.That(t, time.Minute, func() (bool, string) {
		now := l.standbyClaims()
		ready := 0
		for _, sb := range now {
			if string(sb.UID) == from {
				return false, "the standby claim whose machine app took is still there"
			}
			if sb.Status.Phase == hypervisorv1alpha1.MachineReady {
				ready++
			}
		}
		return ready == 2, fmt.Sprintf("%d standby claims Ready: %v", ready, machines(now))
	})

	// A claim with its own hostname does not fit a machine that booted as
	// the template's: it is cloned.
	l.claim("own", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.Hostname = "own" })
	own := l.waitPhase("own", hypervisorv1alpha1.MachineReady, time.Minute)
	if ownVM, _ := l.Sim.VM(int(*own.Status.VMID)); hotVMIDs[*own.Status.VMID] != "" || ownVM.Name != "own" {
		t.Errorf("claim own (its own hostname) has VM %d named %q; want a clone of its own named own", *own.Status.VMID, ownVM.Name)
	}

	// Deleting the claim deletes the machine it took.
	if err := l.C.Delete(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		_, exists := l.Sim.VM(int(*app.Status.VMID))
		err := l.Get(&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "app"}})
		return !exists && apierrors.IsNotFound(err), fmt.Sprintf("VM exists: %v; claim: %v", exists, err)
	})
}

// Claims racing for fewer standby machines than they are: each machine
// goes to exactly one claim, the others are cloned, and every VM has one
// owner.
func TestStandbyMachinesAreTakenExactlyOnce(t *testing.T) {
	l := newLab(t)
	hot := l.keepHot(3)
	hotVMIDs := map[int32]bool{}
	for _, sb := range hot {
		hotVMIDs[*sb.Status.VMID] = true
	}
	const claims = 8
	for i := range claims {
		l.claim(fmt.Sprintf("c%d", i))
	}
	took, seen := 0, map[int32]string{}
	for i := range claims {
		mc := l.waitPhase(fmt.Sprintf("c%d", i), hypervisorv1alpha1.MachineReady, 2*time.Minute)
		if other, dup := seen[*mc.Status.VMID]; dup {
			t.Errorf("claims %s and %s both have VM %d", other, mc.Name, *mc.Status.VMID)
		}
		seen[*mc.Status.VMID] = mc.Name
		if hotVMIDs[*mc.Status.VMID] {
			took++
		}
	}
	if took != len(hot) {
		t.Errorf("%d claims took a standby machine; want all %d of them taken", took, len(hot))
	}
	for _, vm := range l.OwnedVMs() {
		owners := 0
		for _, tag := range vm.Tags {
			if strings.HasPrefix(tag, "hf-owner-") {
				owners++
			}
		}
		if owners != 1 {
			t.Errorf("VM %d has %d owner tags: %v", vm.VMID, owners, vm.Tags)
		}
	}
}

func TestKubeVirtClaimTakesAHotStandbyMachine(t *testing.T) {
	l := newKubeVirtLab(t)
	hot := l.keepHot(1)
	l.claim("app")
	app := l.waitPhase("app", hypervisorv1alpha1.MachineReady, 30*time.Second)
	if app.Status.MachineName != hot[0].Status.MachineName {
		t.Fatalf("claim app has machine %s; want the standby machine %s", app.Status.MachineName, hot[0].Status.MachineName)
	}
	vm, err := l.VM(app.Status.MachineName)
	if err != nil {
		t.Fatal(err)
	}
	if got := vm.Labels[kubevirt.LabelOwnerUID]; got != string(app.UID) {
		t.Errorf("VirtualMachine %s is labelled as %s's; want claim app's %s", vm.Name, got, app.UID)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		now := l.standbyClaims()
		return len(now) == 1 && now[0].UID != hot[0].UID && now[0].Status.Phase == hypervisorv1alpha1.MachineReady,
			fmt.Sprintf("standby claims: %v", machines(now))
	})
}

// *tenant* A claim takes only standby machines of its own namespace: two
// teams with a template of the same name on one Proxmox, each keeping its
// own, never take each other's.
func TestStandbyMachinesStayInTheirNamespace(t *testing.T) {
	a := newLab(t)
	aHot := a.keepHot(2)
	b := &lab{hypervisorlab.ProxmoxSharing(t, a.Lab)}
	bHot := b.keepHot(1)
	b.AsTenant()
	b.claim("x")
	b.claim("y")
	x := b.waitPhase("x", hypervisorv1alpha1.MachineReady, time.Minute)
	y := b.waitPhase("y", hypervisorv1alpha1.MachineReady, time.Minute)
	for _, mc := range []*hypervisorv1alpha1.MachineClaim{x, y} {
		if slices.Contains(machines(aHot), mc.Status.MachineName) {
			t.Errorf("claim %s/%s took standby machine %s of namespace %s", b.NS, mc.Name, mc.Status.MachineName, a.NS)
		}
	}
	if x.Status.MachineName != bHot[0].Status.MachineName && y.Status.MachineName != bHot[0].Status.MachineName {
		t.Errorf("neither claim took the namespace's own standby machine %s: %s, %s", bHot[0].Status.MachineName, x.Status.MachineName, y.Status.MachineName)
	}
	for _, sb := range a.standbyClaims() {
		if _, bound := standby.BoundTo(&sb); bound {
			t.Errorf("standby claim %s/%s is bound: %v", a.NS, sb.Name, sb.Annotations)
		}
	}
}

// A schedule in force sets how many machines are hot, and a burst of
// claims adds its headroom: the template's status says both.
func TestScheduleAndBurstHeadroomSetTheHotCount(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}}
	setStandby := func(spec *hypervisorv1alpha1.StandbySpec) {
		t.Helper()
		if err := l.Get(tmpl); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(tmpl.DeepCopy())
		tmpl.Spec.Standby = spec
		if err := l.C.Patch(ctx, tmpl, patch); err != nil {
			t.Fatal(err)
		}
	}
	waitHot := func(want int32, schedule string, peak int32) {
		t.Helper()
		eventually.That(t, time.Minute, func() (bool, string) {
			if err := l.Get(tmpl); err != nil {
				return false, err.Error()
			}
			st := tmpl.Status.Standby
			return st != nil && st.Want == want && st.Hot == want && st.Schedule == schedule && st.HeadroomPeak == peak,
				fmt.Sprintf("standby %+v; want %d hot from %q, headroom peak %d", st, want, schedule, peak)
		})
	}
	// A window that began at the last minute, and goes on.
	always := hypervisorv1alpha1.StandbySchedule{Name: "always", Start: "* * * * *", Hot: 1}
	setStandby(&hypervisorv1alpha1.StandbySpec{Hot: 0, Schedules: []hypervisorv1alpha1.StandbySchedule{always}})
	waitHot(1, "always", 0)

	// Two claims in use (their own hostnames: they are cloned) make a peak
	// of two, kept hot beside the window's one.
	setStandby(&hypervisorv1alpha1.StandbySpec{Hot: 0, Schedules: []hypervisorv1alpha1.StandbySchedule{always},
		BurstHeadroom: &hypervisorv1alpha1.BurstHeadroom{Max: 3, HalfLife: &metav1.Duration{Duration: time.Hour}}})
	for _, n := range []string{"a", "b"} {
		l.claim(n, func(mc *hypervisorv1alpha1.MachineClaim) { mc.Spec.Hostname = n })
	}
	waitHot(3, "always", 2)

	// A schedule that cannot be read stalls the template, naming the field.
	setStandby(&hypervisorv1alpha1.StandbySpec{Schedules: []hypervisorv1alpha1.StandbySchedule{{Name: "bad", Start: "0 8 * * *", TimeZone: "Mars/Olympus", Hot: 1}}})
	l.WaitReason(tmpl, "InvalidSpec", time.Minute)
}

// A warm standby machine is cloned and powered off, never configured: a
// claim with its own user data and hostname (which no hot machine fits)
// takes it instead of cloning, configures it with its own user data and
// boots it; the template makes another warm one.
func TestClaimWithItsOwnUserDataTakesAWarmMachine(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}}
	if err := l.Get(tmpl); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(tmpl.DeepCopy())
	tmpl.Spec.Standby = &hypervisorv1alpha1.StandbySpec{Warm: 1}
	if err := l.C.Patch(ctx, tmpl, patch); err != nil {
		t.Fatal(err)
	}
	var warm hypervisorv1alpha1.MachineClaim
	eventually.That(t, time.Minute, func() (bool, string) {
		list := l.standbyClaims()
		if err := l.Get(tmpl); err != nil {
			return false, err.Error()
		}
		for _, sb := range list {
			if sb.Status.Phase == hypervisorv1alpha1.MachineWarm && standby.IsWarm(&sb) && tmpl.Status.Standby != nil && tmpl.Status.Standby.Warm == 1 {
				warm = sb
				return true, ""
			}
		}
		return false, fmt.Sprintf("standby claims %v; template says %+v", machines(list), tmpl.Status.Standby)
	})
	vmid := int(*warm.Status.VMID)
	vm, _ := l.Sim.VM(vmid)
	if _, booted := l.Sim.SeedAtBoot(vmid); vm.Status != "stopped" || booted || slices.ContainsFunc(vm.Tags, func(tag string) bool { return strings.HasPrefix(tag, "hf-owner-") }) {
		t.Fatalf("warm VM %d: status %s, booted %v, tags %v; want stopped, never booted, not configured", vmid, vm.Status, booted, vm.Tags)
	}

	const userData = "#cloud-config\nruncmd: [echo warm-taker]\n"
	l.claim("app", func(mc *hypervisorv1alpha1.MachineClaim) {
		mc.Spec.UserData, mc.Spec.Hostname = userData, "app"
	})
	app := l.waitPhase("app", hypervisorv1alpha1.MachineReady, time.Minute)
	if int(*app.Status.VMID) != vmid {
		t.Fatalf("claim app runs VM %d; want the warm machine %d", *app.Status.VMID, vmid)
	}
	vm, _ = l.Sim.VM(vmid)
	if !slices.Contains(vm.Tags, "hf-owner-"+string(app.UID)) || slices.Contains(vm.Tags, "hf-owner-"+string(warm.UID)) ||
		!strings.Contains(vm.Description, "hyperfleet-owner-uid: "+string(app.UID)) {
		t.Errorf("the machine's owner marks are not claim app's alone: tags %v, description %q", vm.Tags, vm.Description)
	}
	seed, ok := l.Sim.SeedAtBoot(vmid)
	if !ok {
		t.Fatalf("VM %d booted without a NoCloud ISO", vmid)
	}
	if got, err := runnersim.NoCloudUserData(seed); err != nil || !strings.Contains(got, "echo warm-taker") {
		t.Errorf("VM %d booted with user data %q (%v); want claim app's", vmid, got, err)
	}
	// Another warm machine takes its place.
	eventually.That(t, time.Minute, func() (bool, string) {
		for _, sb := range l.standbyClaims() {
			if sb.UID == warm.UID {
				return false, "the warm claim whose machine app took is still there"
			}
			if sb.Status.Phase == hypervisorv1alpha1.MachineWarm {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no new warm machine: %v", machines(l.standbyClaims()))
	})
}
