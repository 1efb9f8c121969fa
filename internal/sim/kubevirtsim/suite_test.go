package kubevirtsim

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// sim is the one simulator every test in the package drives.
var sim *Simulator

// testLatencies keep each step visible yet a whole start under half a second.
var testLatencies = Latencies{
	Pending:             20 * time.Millisecond,
	Scheduling:          50 * time.Millisecond,
	Scheduled:           30 * time.Millisecond,
	Boot:                60 * time.Millisecond,
	Shutdown:            50 * time.Millisecond,
	StartFailureBackoff: time.Second, // long enough to see CrashLoopBackOff
}

// timeout bounds every wait: generous for a loaded two-core machine.
const timeout = 30 * time.Second

func TestMain(m *testing.M) { testenv.MainWith(m, setup) }

func setup() (func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Install(ctx, testenv.Config()); err != nil {
		return nil, err
	}
	log := testLogger()
	ctrl.SetLogger(log) // for controller-runtime's informers
	s, err := Start(context.Background(), testenv.Config(), Options{Latencies: testLatencies, Logger: log})
	if err != nil {
		return nil, err
	}
	sim = s
	return s.Stop, nil
}

// testLogger prints the simulator's logs when KUBEVIRTSIM_LOG is set (to a
// verbosity, e.g. 1), and discards them otherwise.
func testLogger() logr.Logger {
	v := os.Getenv("KUBEVIRTSIM_LOG")
	if v == "" {
		return logr.New(discardSink{})
	}
	var level int
	_, _ = fmt.Sscan(v, &level)
	return funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: level})
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	t.Cleanup(cancel)
	return ctx
}

// newVM returns a small VM as a user or the operator would write it.
func newVM(ns, name string, rs kubevirtv1.VirtualMachineRunStrategy) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "test"}},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: &rs,
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"kubevirt.io/domain": name, "hyperfleet.io/owner": "test"},
					Annotations: map[string]string{"hyperfleet.io/note": "from the template"},
				},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{
						Resources: kubevirtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
						Devices: kubevirtv1.Devices{
							Disks: []kubevirtv1.Disk{{Name: "rootdisk", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}}},
						},
					},
					Volumes: []kubevirtv1.Volume{{
						Name:         "rootdisk",
						VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "quay.io/containerdisks/ubuntu:24.04"}},
					}},
				},
			},
		},
	}
}

func create(t testing.TB, obj client.Object) {
	t.Helper()
	if err := testenv.Client().Create(ctxT(t), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func getVM(t testing.TB, ns, name string) *kubevirtv1.VirtualMachine {
	t.Helper()
	vm := &kubevirtv1.VirtualMachine{}
	if err := testenv.Client().Get(ctxT(t), types.NamespacedName{Namespace: ns, Name: name}, vm); err != nil {
		t.Fatalf("reading VM %s/%s: %v", ns, name, err)
	}
	return vm
}

// getVMI returns the VMI, or nil when there is none.
func getVMI(t testing.TB, ns, name string) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	vmi := &kubevirtv1.VirtualMachineInstance{}
	err := testenv.Client().Get(ctxT(t), types.NamespacedName{Namespace: ns, Name: name}, vmi)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading VMI %s/%s: %v", ns, name, err)
	}
	return vmi
}

// updateVM applies mutate to the VM's spec and metadata, retrying conflicts
// with the simulator's own writes.
func updateVM(t testing.TB, ns, name string, mutate func(*kubevirtv1.VirtualMachine)) {
	t.Helper()
	for i := 0; ; i++ {
		vm := getVM(t, ns, name)
		mutate(vm)
		err := testenv.Client().Update(ctxT(t), vm)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || i == 20 {
			t.Fatalf("updating VM %s/%s: %v", ns, name, err)
		}
	}
}

func setRunStrategy(t testing.TB, ns, name string, rs kubevirtv1.VirtualMachineRunStrategy) {
	t.Helper()
	updateVM(t, ns, name, func(vm *kubevirtv1.VirtualMachine) { vm.Spec.RunStrategy = &rs })
}

// waitVMI waits until the VMI exists and cond holds for it.
func waitVMI(t testing.TB, ns, name string, cond func(*kubevirtv1.VirtualMachineInstance) (bool, string)) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	var last *kubevirtv1.VirtualMachineInstance
	eventually.That(t, timeout, func() (bool, string) {
		last = getVMI(t, ns, name)
		if last == nil {
			return false, "no VMI " + ns + "/" + name
		}
		return cond(last)
	})
	return last
}

// waitVM waits until cond holds for the VM.
func waitVM(t testing.TB, ns, name string, cond func(*kubevirtv1.VirtualMachine) (bool, string)) *kubevirtv1.VirtualMachine {
	t.Helper()
	var last *kubevirtv1.VirtualMachine
	eventually.That(t, timeout, func() (bool, string) {
		last = getVM(t, ns, name)
		return cond(last)
	})
	return last
}

// waitGone waits until the object no longer exists.
func waitGone(t testing.TB, obj client.Object) {
	t.Helper()
	key := client.ObjectKeyFromObject(obj)
	eventually.That(t, timeout, func() (bool, string) {
		err := testenv.Client().Get(ctxT(t), key, obj)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("%T %s still exists (err %v, finalizers %v, deleting %v)", obj, key, err, obj.GetFinalizers(), obj.GetDeletionTimestamp() != nil)
	})
}

// consistently checks cond for d, polling: the way to assert that
// something does not happen.
func consistently(t testing.TB, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok, why := cond(); !ok {
			t.Fatalf("condition broke within %s: %s", d, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func vmiReadyWithIP(vmi *kubevirtv1.VirtualMachineInstance) (bool, string) {
	if vmi.Status.Phase != kubevirtv1.Running || !vmiConditionTrue(vmi, kubevirtv1.VirtualMachineInstanceReady) ||
		len(vmi.Status.Interfaces) == 0 || vmi.Status.Interfaces[0].IP == "" {
		return false, fmt.Sprintf("VMI phase %q, conditions %v, interfaces %v", vmi.Status.Phase, vmi.Status.Conditions, vmi.Status.Interfaces)
	}
	return true, ""
}

func vmPrintable(want kubevirtv1.VirtualMachinePrintableStatus) func(*kubevirtv1.VirtualMachine) (bool, string) {
	return func(vm *kubevirtv1.VirtualMachine) (bool, string) {
		if vm.Status.PrintableStatus != want {
			return false, fmt.Sprintf("VM printableStatus %q (want %q), status %+v", vm.Status.PrintableStatus, want, vm.Status)
		}
		return true, ""
	}
}

func vmRunningReady(vm *kubevirtv1.VirtualMachine) (bool, string) {
	if vm.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusRunning || !vm.Status.Ready {
		return false, fmt.Sprintf("VM printableStatus %q ready %v", vm.Status.PrintableStatus, vm.Status.Ready)
	}
	return true, ""
}

// startRunning creates a VM with this run strategy and waits until its
// guest is up.
func startRunning(t testing.TB, ns, name string, rs kubevirtv1.VirtualMachineRunStrategy) *kubevirtv1.VirtualMachineInstance {
	t.Helper()
	create(t, newVM(ns, name, rs))
	vmi := waitVMI(t, ns, name, vmiReadyWithIP)
	waitVM(t, ns, name, vmRunningReady)
	return vmi
}
