package installations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// grace is the sweepers' grace, on the real clock: the test waits for an
// orphan of each installation to be swept, which proves the grace passed.
const grace = 2 * time.Second

// installation is one operator installation: its id and its labs (one
// Proxmox, one KubeVirt namespace), watched by its own manager.
type installation struct {
	// flag is its --installation-id; "" leaves the default, the UID of
	// its operator namespace, which id then holds.
	flag, id string
	// operatorNS is its operator namespace.
	operatorNS string
	pve, kv    *hypervisorlab.Lab
	claimsOf   map[*hypervisorlab.Lab][]string
}

// start runs a manager for the installation as `hyperfleet run
// --installation-id=<id> --namespaces=<its namespaces>` would, with the
// reconcilers a claim needs and the sweeper.
func (in *installation) start(t *testing.T) {
	t.Helper()
	in.id = in.flag
	if in.flag == "" {
		ns := &corev1.Namespace{}
		if err := testenv.Client().Get(context.Background(), client.ObjectKey{Name: in.operatorNS}, ns); err != nil {
			t.Fatal(err)
		}
		in.id = string(ns.UID)
	}
	mgr, err := manager.New(testenv.Config(), manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: in.operatorNS,
		InstallationID: in.flag, Namespaces: []string{in.pve.NS, in.kv.NS},
		ObserveInterval: time.Second, FinalizationTimeout: time.Minute,
		OrphanSweepInterval: 200 * time.Millisecond, OrphanGrace: grace,
		Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
			manager.ControllerMachineClaim, manager.ControllerOrphans},
		SkipControllerNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager of %s: %v", in.id, err)
		}
	})
}

func (in *installation) claim(l *hypervisorlab.Lab, name string) {
	l.Create(&hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
	})
	in.claimsOf[l] = append(in.claimsOf[l], name)
}

// machinesStand checks that every claim of the installation is Ready and
// its machine exists on the shared hypervisor.
func (in *installation) machinesStand(t *testing.T) {
	t.Helper()
	for l, names := range in.claimsOf {
		for _, name := range names {
			mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := l.Get(mc); err != nil || mc.Status.Phase != hypervisorv1alpha1.MachineReady {
				t.Errorf("%s: claim %s/%s is not Ready (%v): %s", in.id, l.NS, name, err, hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions))
				continue
			}
			switch {
			case l.Sim != nil:
				vm, ok := l.Sim.VM(int(*mc.Status.VMID))
				if !ok || vm.Status != "running" {
					t.Errorf("%s: the VM %d of claim %s/%s is gone or stopped: %+v", in.id, *mc.Status.VMID, l.NS, name, vm)
				} else if !slices.Contains(vm.Tags, "hf-inst-"+in.id) {
					t.Errorf("%s: the VM %d of claim %s/%s has tags %v, without its installation's", in.id, vm.VMID, l.NS, name, vm.Tags)
				}
			default:
				vm, err := l.VM(mc.Status.MachineName)
				if err != nil {
					t.Errorf("%s: the VirtualMachine of claim %s/%s: %v", in.id, l.NS, name, err)
				} else if vm.Labels[kubevirt.LabelInstallation] != in.id {
					t.Errorf("%s: the VirtualMachine of claim %s/%s has labels %v, without its installation's", in.id, l.NS, name, vm.Labels)
				}
			}
		}
	}
}

func (in *installation) waitReady(t *testing.T) {
	t.Helper()
	for l, names := range in.claimsOf {
		for _, name := range names {
			mc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
			eventually.That(t, 2*time.Minute, func() (bool, string) {
				if err := l.Get(mc); err != nil {
					return false, err.Error()
				}
				return mc.Status.Phase == hypervisorv1alpha1.MachineReady,
					fmt.Sprintf("%s: claim %s/%s: %s", in.id, l.NS, name, hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions))
			})
		}
	}
}

// orphanVM plants, in a KubeVirt lab, a VirtualMachine whose claim is gone,
// marked for installation (none when "").
func orphanVM(l *hypervisorlab.Lab, name, installation string) {
	labels := map[string]string{
		kubevirt.LabelManaged: "true", kubevirt.LabelOwnerKind: "MachineClaim", kubevirt.LabelOwnerUID: "0badc0de-0000-4000-8000-00000000000" + fmt.Sprint(len(name)%10),
	}
	if installation != "" {
		labels[kubevirt.LabelInstallation] = installation
	}
	halted := kubevirtv1.RunStrategyHalted
	l.Create(&kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	})
}

// deletedBy returns the namespaces whose events say their sweeper deleted
// the machine named what.
func deletedBy(t *testing.T, what string, namespaces ...string) []string {
	t.Helper()
	var out []string
	for _, ns := range namespaces {
		var list eventsv1.EventList
		if err := testenv.Client().List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == "OrphanDeleted" && strings.Contains(e.Note, what) {
				out = append(out, ns)
				break
			}
		}
	}
	return out
}

// Two installations share one Proxmox and one KubeVirt, each with its own
// claims. Past the sweepers' grace every claim's machine still stands; an
// orphan of each installation is deleted by that installation's sweeper
// alone; an orphan of a third installation, which runs no sweeper here, and
// machines made before installations whose claims neither knows, stay.
func TestTwoInstallationsOnOneHypervisorKeepEachOthersMachines(t *testing.T) {
	pveA := hypervisorlab.Proxmox(t)
	a := &installation{flag: "inst-a", operatorNS: hypervisorlab.OperatorNamespace,
		pve: pveA, kv: hypervisorlab.KubeVirt(t), claimsOf: map[*hypervisorlab.Lab][]string{}}
	// b runs with the default id: the UID of its operator namespace.
	b := &installation{pve: hypervisorlab.ProxmoxSharing(t, pveA), kv: hypervisorlab.KubeVirt(t), claimsOf: map[*hypervisorlab.Lab][]string{}}
	b.operatorNS = b.pve.NS
	sim := pveA.Sim
	for _, in := range []*installation{a, b} {
		in.start(t)
		for _, name := range []string{"one", "two"} {
			in.claim(in.pve, name)
			in.claim(in.kv, name)
		}
	}
	a.waitReady(t)
	b.waitReady(t)

	// The orphans: each installation's own, a third's, and unmarked ones.
	sim.AddVM("pve1", 4100, "hf-orphan-of-a", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-00000000000a", "hf-inst-inst-a"}, true)
	sim.AddVM("pve1", 4200, "hf-orphan-of-b", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-00000000000b", "hf-inst-" + b.id}, true)
	sim.AddVM("pve1", 4300, "hf-orphan-of-c", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-00000000000c", "hf-inst-inst-c"}, true)
	sim.AddVM("pve1", 4400, "hf-before-installations", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-00000000000d"}, true)
	orphanVM(a.kv, "kv-orphan-of-a", "inst-a")
	orphanVM(b.kv, "kv-orphan-of-b", b.id)
	orphanVM(a.kv, "kv-orphan-of-c", "inst-c")
	orphanVM(b.kv, "kv-before-installations", "")

	eventually.That(t, time.Minute, func() (bool, string) {
		_, pa := sim.VM(4100)
		_, pb := sim.VM(4200)
		_, errA := a.kv.VM("kv-orphan-of-a")
		_, errB := b.kv.VM("kv-orphan-of-b")
		return !pa && !pb && apierrors.IsNotFound(errA) && apierrors.IsNotFound(errB),
			fmt.Sprintf("orphans left: proxmox a %v, b %v; kubevirt a %v, b %v", pa, pb, errA, errB)
	})

	a.machinesStand(t)
	b.machinesStand(t)
	for _, vmid := range []int{4300, 4400} {
		if _, ok := sim.VM(vmid); !ok {
			t.Errorf("VM %d, which neither installation may delete, is gone", vmid)
		}
	}
	if _, err := a.kv.VM("kv-orphan-of-c"); err != nil {
		t.Errorf("inst-c's VirtualMachine: %v", err)
	}
	if _, err := b.kv.VM("kv-before-installations"); err != nil {
		t.Errorf("the VirtualMachine made before installations: %v", err)
	}
	for what, want := range map[string]string{
		"hf-orphan-of-a": a.pve.NS, "hf-orphan-of-b": b.pve.NS, "kv-orphan-of-a": a.kv.NS, "kv-orphan-of-b": b.kv.NS,
	} {
		eventually.That(t, 10*time.Second, func() (bool, string) {
			got := deletedBy(t, what, a.pve.NS, b.pve.NS, a.kv.NS, b.kv.NS)
			return len(got) == 1 && got[0] == want, fmt.Sprintf("%s deleted by the sweepers of %v, want only %s's", what, got, want)
		})
	}
}
