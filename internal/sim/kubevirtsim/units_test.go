package kubevirtsim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestPrintableStatus(t *testing.T) {
	now := metav1.Now()
	vmi := func(phase kubevirtv1.VirtualMachineInstancePhase, mods ...func(*kubevirtv1.VirtualMachineInstance)) *kubevirtv1.VirtualMachineInstance {
		v := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase}}
		for _, m := range mods {
			m(v)
		}
		return v
	}
	deleting := func(v *kubevirtv1.VirtualMachineInstance) { v.DeletionTimestamp = &now }
	unschedulable := func(v *kubevirtv1.VirtualMachineInstance) {
		v.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{
			Type: kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		}}
	}
	paused := func(v *kubevirtv1.VirtualMachineInstance) {
		v.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue}}
	}
	vm := func(rs kubevirtv1.VirtualMachineRunStrategy, mods ...func(*kubevirtv1.VirtualMachine)) *kubevirtv1.VirtualMachine {
		v := &kubevirtv1.VirtualMachine{Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: &rs}}
		for _, m := range mods {
			m(v)
		}
		return v
	}
	vmDeleting := func(v *kubevirtv1.VirtualMachine) { v.DeletionTimestamp = &now }
	failedOnce := func(v *kubevirtv1.VirtualMachine) {
		v.Status.StartFailure = &kubevirtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 1}
	}
	tests := []struct {
		name          string
		vm            *kubevirtv1.VirtualMachine
		vmi           *kubevirtv1.VirtualMachineInstance
		start, stop   bool
		wantPrintable kubevirtv1.VirtualMachinePrintableStatus
	}{
		{"deleted VM", vm(kubevirtv1.RunStrategyAlways, vmDeleting), vmi(kubevirtv1.Running), false, false, kubevirtv1.VirtualMachineStatusTerminating},
		{"VMI being deleted", vm(kubevirtv1.RunStrategyHalted), vmi(kubevirtv1.Running, deleting), false, false, kubevirtv1.VirtualMachineStatusStopping},
		{"VMI just deleted", vm(kubevirtv1.RunStrategyHalted), vmi(kubevirtv1.Running), false, true, kubevirtv1.VirtualMachineStatusStopping},
		{"running", vm(kubevirtv1.RunStrategyAlways), vmi(kubevirtv1.Running), false, false, kubevirtv1.VirtualMachineStatusRunning},
		{"paused", vm(kubevirtv1.RunStrategyAlways), vmi(kubevirtv1.Running, paused), false, false, kubevirtv1.VirtualMachineStatusPaused},
		{"unschedulable", vm(kubevirtv1.RunStrategyAlways), vmi(kubevirtv1.Scheduling, unschedulable), false, false, kubevirtv1.VirtualMachineStatusUnschedulable},
		{"VMI just created", vm(kubevirtv1.RunStrategyAlways), vmi(""), true, false, kubevirtv1.VirtualMachineStatusStarting},
		{"pending", vm(kubevirtv1.RunStrategyAlways), vmi(kubevirtv1.Pending), false, false, kubevirtv1.VirtualMachineStatusStarting},
		{"scheduled", vm(kubevirtv1.RunStrategyAlways), vmi(kubevirtv1.Scheduled), false, false, kubevirtv1.VirtualMachineStatusStarting},
		{"backing off", vm(kubevirtv1.RunStrategyAlways, failedOnce), nil, false, false, kubevirtv1.VirtualMachineStatusCrashLoopBackOff},
		{"failed VMI backing off", vm(kubevirtv1.RunStrategyAlways, failedOnce), vmi(kubevirtv1.Failed), false, false, kubevirtv1.VirtualMachineStatusCrashLoopBackOff},
		{"Manual ignores start failures", vm(kubevirtv1.RunStrategyManual, failedOnce), nil, false, false, kubevirtv1.VirtualMachineStatusStopped},
		{"no VMI", vm(kubevirtv1.RunStrategyHalted), nil, false, false, kubevirtv1.VirtualMachineStatusStopped},
		{"guest shut down", vm(kubevirtv1.RunStrategyOnce), vmi(kubevirtv1.Succeeded), false, false, kubevirtv1.VirtualMachineStatusStopped},
		{"node lost", vm(kubevirtv1.RunStrategyAlways), vmi(kubevirtv1.Unknown), false, false, kubevirtv1.VirtualMachineStatusUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := printableStatus(tt.vm, tt.vmi, tt.start, tt.stop); got != tt.wantPrintable {
				t.Errorf("printableStatus = %s, want %s", got, tt.wantPrintable)
			}
		})
	}
}

func TestSyncConditionsMirrorsTheVMI(t *testing.T) {
	now := time.Now()
	vm := &kubevirtv1.VirtualMachine{}
	vmi := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Conditions: []kubevirtv1.VirtualMachineInstanceCondition{
		{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue},
		{Type: kubevirtv1.VirtualMachineInstanceAgentConnected, Status: corev1.ConditionTrue},
	}}}
	syncConditions(vm, vmi, &syncError{reason: failedCreateReason, msg: "boom"}, now)
	if got := conditionSummary(vm); !slices.Equal(got, []string{"Ready=True", "Failure=True/FailedCreate", "AgentConnected=True"}) {
		t.Errorf("conditions %v", got)
	}
	// The agent disconnects and the error is fixed: both conditions go.
	vmi.Status.Conditions = vmi.Status.Conditions[:1]
	syncConditions(vm, vmi, nil, now)
	if got := conditionSummary(vm); !slices.Equal(got, []string{"Ready=True"}) {
		t.Errorf("conditions %v", got)
	}
	// Without a VMI, Ready says so; timestamps stay put while nothing changes.
	syncConditions(vm, nil, nil, now)
	first := vm.Status.Conditions[0]
	syncConditions(vm, nil, nil, now.Add(time.Hour))
	if got := conditionSummary(vm); !slices.Equal(got, []string{"Ready=False/VMINotExists"}) || vm.Status.Conditions[0] != first {
		t.Errorf("conditions %v (%+v, first %+v)", got, vm.Status.Conditions[0], first)
	}
}

func conditionSummary(vm *kubevirtv1.VirtualMachine) []string {
	var out []string
	for _, c := range vm.Status.Conditions {
		s := fmt.Sprintf("%s=%s", c.Type, c.Status)
		if c.Reason != "" {
			s += "/" + c.Reason
		}
		out = append(out, s)
	}
	return out
}

func TestStateChangeRequests(t *testing.T) {
	uid := types.UID("vmi-1")
	running := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running}}
	other := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: "vmi-2"}}
	withReq := func(r kubevirtv1.VirtualMachineStateChangeRequest) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{Status: kubevirtv1.VirtualMachineStatus{StateChangeRequests: []kubevirtv1.VirtualMachineStateChangeRequest{r}}}
	}
	start := withReq(kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StartRequest})
	stop := withReq(kubevirtv1.VirtualMachineStateChangeRequest{Action: kubevirtv1.StopRequest, UID: &uid})
	if !hasStartRequest(start) || hasStartRequest(stop) {
		t.Error("hasStartRequest")
	}
	if !hasStopRequestFor(stop, running) || hasStopRequestFor(stop, other) || hasStopRequestFor(start, running) {
		t.Error("hasStopRequestFor")
	}
	if firstRequestServed(start, nil) || !firstRequestServed(start, running) {
		t.Error("a start request is served once a live VMI exists")
	}
	if firstRequestServed(stop, running) || !firstRequestServed(stop, nil) || !firstRequestServed(stop, other) {
		t.Error("a stop request is served once its VMI is gone")
	}
}

func TestStartFailureBackoff(t *testing.T) {
	unit := time.Second
	for failures, want := range map[int]time.Duration{0: unit, 1: unit, 2: 4 * unit, 5: 25 * unit, 6: 30 * unit, 1000: 30 * unit} {
		if got := startFailureBackoff(failures, unit); got != want {
			t.Errorf("startFailureBackoff(%d) = %s, want %s", failures, got, want)
		}
	}
}

func TestNewVMIFromVM(t *testing.T) {
	vm := newVM("ns", "web", kubevirtv1.RunStrategyAlways)
	vm.UID, vm.Generation = "vm-uid", 7
	vmi := newVMIFromVM(vm)
	if vmi.Name != "web" || vmi.Namespace != "ns" || vmi.Annotations[kubevirtv1.VirtualMachineGenerationAnnotation] != "7" {
		t.Errorf("metadata %+v", vmi.ObjectMeta)
	}
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.UID != "vm-uid" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller reference %+v", ref)
	}
	if len(vmi.Spec.Networks) != 1 || vmi.Spec.Networks[0].Pod == nil ||
		len(vmi.Spec.Domain.Devices.Interfaces) != 1 || vmi.Spec.Domain.Devices.Interfaces[0].Masquerade == nil {
		t.Errorf("want KubeVirt's default pod network, got %+v / %+v", vmi.Spec.Networks, vmi.Spec.Domain.Devices.Interfaces)
	}
	// The template is copied, not shared.
	vmi.Labels["x"] = "y"
	vmi.Spec.Volumes[0].Name = "changed"
	if vm.Spec.Template.ObjectMeta.Labels["x"] != "" || vm.Spec.Template.Spec.Volumes[0].Name != "rootdisk" {
		t.Error("the VMI shares the VM's template")
	}
	// No pod network when the template opts out.
	vm.Spec.Template.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	if got := newVMIFromVM(vm); len(got.Spec.Networks) != 0 {
		t.Errorf("networks %+v despite autoattachPodInterface=false", got.Spec.Networks)
	}
}

func TestFirmwareUUID(t *testing.T) {
	// RFC 9562's example: the v5 UUID of www.example.com in the DNS namespace.
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got := uuidV5(dns, "www.example.com"); got != "2ed6657d-e927-568b-95e1-2665a8aea6a2" {
		t.Errorf("uuidV5 = %s", got)
	}
	a, again, b := firmwareUUID("a"), firmwareUUID("a"), firmwareUUID("b")
	if a != again || a == b || len(a) != 36 || a[14] != '5' {
		t.Errorf("firmwareUUID: a=%s again=%s b=%s, want a stable v5 UUID per name", a, again, b)
	}
}

func TestIPAM(t *testing.T) {
	p, err := newIPAM("10.0.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.allocate("a", 1)
	b, _ := p.allocate("b", 2)
	again, _ := p.allocate("a", 1)
	if !slices.Equal(a, []string{"10.0.0.1"}) || !slices.Equal(b, []string{"10.0.0.2", "10.0.0.3"}) || !slices.Equal(again, a) {
		t.Fatalf("a=%v b=%v again=%v", a, b, again)
	}
	// A freed address is not handed straight out again.
	p.release("a")
	if c, _ := p.allocate("c", 1); !slices.Equal(c, []string{"10.0.0.4"}) {
		t.Errorf("c = %v, want the next address in order", c)
	}
	// Addresses a VMI already reports are kept from others.
	p.reserve("d", []string{"10.0.0.5", "192.168.0.1", "garbage"})
	if e, _ := p.allocate("e", 1); !slices.Equal(e, []string{"10.0.0.6"}) {
		t.Errorf("e = %v, want 10.0.0.6 past the reserved 10.0.0.5", e)
	}
	// The pool ends at .254 and then wraps to what is free.
	for i := 0; ; i++ {
		if _, err := p.allocate(types.UID(fmt.Sprint("fill-", i)), 1); err != nil {
			if len(p.used) != 254 {
				t.Errorf("exhausted with %d in use, want 254 (.1 to .254)", len(p.used))
			}
			break
		}
	}
	for _, bad := range []string{"10.0.0.0/31", "fd00::/64", "10.0.0.0/4", "nonsense"} {
		if _, err := newIPAM(bad); err == nil {
			t.Errorf("newIPAM(%q) accepted", bad)
		}
	}
	if macFor("10.244.1.2") != "52:54:00:f4:01:02" {
		t.Errorf("macFor = %s", macFor("10.244.1.2"))
	}
}

func TestPickNode(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	if got := pickNode(nodes, map[string]int{"a": 2, "b": 1, "c": 1}, nil); got != "b" {
		t.Errorf("least loaded = %q, want b (first of the least loaded)", got)
	}
	if got := pickNode(nodes, nil, map[string]string{"kubernetes.io/hostname": "c"}); got != "c" {
		t.Errorf("pinned = %q, want c", got)
	}
	if got := pickNode(nodes, nil, map[string]string{"gpu": "yes"}); got != "" {
		t.Errorf("impossible selector placed on %q", got)
	}
}

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{Latencies: Latencies{Boot: -1, Shutdown: time.Minute}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultLatencies()
	if o.Latencies.Boot != 0 || o.Latencies.Shutdown != time.Minute || o.Latencies.Pending != d.Pending ||
		!slices.Equal(o.Nodes, defaultNodes) || o.PodCIDR != defaultPodCIDR || o.Logger.GetSink() == nil {
		t.Errorf("defaults %+v", o)
	}
	for _, bad := range []Options{{Nodes: []string{"a", "a"}}, {Nodes: []string{""}}, {PodCIDR: "x"}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
