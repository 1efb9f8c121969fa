package kubevirt

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/hyperfleet/hyperfleet/providers"
)

const vmTemplate = `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: ${vm_name}
  namespace: ${namespace}
  labels:
    app: desktop
    vm: ${vm_name}
    app.kubernetes.io/managed-by: ${managed_by}
spec:
  running: true
  template:
    metadata:
      labels:
        kubevirt.io/vm: ${vm_name}
    spec:
      domain:
        devices:
          disks:
            - name: containerdisk
              disk: {bus: virtio}
            - name: cloudinitdisk
              disk: {bus: virtio}
        resources:
          requests:
            memory: 2Gi
      volumes:
        - name: containerdisk
          containerDisk:
            image: quay.io/containerdisks/ubuntu:22.04
        - name: cloudinitdisk
          cloudInitNoCloud:
            userDataBase64: ${user_data_base64}
`

func TestRender(t *testing.T) {
	vars := map[string]string{VarVMName: "desk-a", VarNamespace: "ns", "owner_name": "a", VarManagedBy: "hf", VarUserDataBase64: "eA=="}
	cases := []struct {
		name, in, want, err string
	}{
		{name: "all variables", in: "${vm_name}/${namespace}/${owner_name}/${managed_by}/${user_data_base64}", want: "desk-a/ns/a/hf/eA=="},
		{name: "no placeholders", in: "plain: text\n", want: "plain: text\n"},
		{name: "a lone dollar stays", in: "cost: $5", want: "cost: $5"},
		{name: "unknown variable named", in: "a: 1\nb: ${vm_nmea}\n", err: "line 2: unknown variable ${vm_nmea}; the template may use only ${vm_name}, ${namespace}, ${managed_by}, ${user_data_base64}, ${owner_name}"},
		{name: "unclosed", in: "name: ${vm_name\nx: y", err: "never closed"},
		{name: "missing value", in: "${managed_by}", err: "unknown variable ${managed_by}; the template may use only no variables"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := vars
			if tc.name == "missing value" {
				v = map[string]string{}
			}
			got, err := Render(tc.in, v)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Render error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Render = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func testProvider(t *testing.T) *Provider {
	t.Helper()
	return &Provider{cfg: Config{OwnerKind: "Desk", ManagedBy: "hyperfleet", Labels: map[string]string{"team": "desk"}, Installation: "prod-1"}}
}

// The template's placeholders take the provider's values and the caller's
// own (Variables); a caller's variable named like one of the provider's
// changes nothing.
func TestBuildFromTemplate(t *testing.T) {
	p := testProvider(t)
	spec := providers.MachineSpec{
		Ref:       providers.MachineRef{Name: "desk-a", Namespace: "ignored"},
		Owner:     providers.Owner{UID: "uid-1", Namespace: "ns", Name: "a"},
		CloudInit: providers.CloudInitSpec{UserData: "#cloud-config\npassword: s3cret\n"},
		KubeVirt: &providers.KubeVirtSpec{
			Template:       []byte(strings.Replace(vmTemplate, "app: desktop", "desk: ${owner_name}", 1)),
			TemplateSource: "ConfigMap x",
			Variables:      map[string]string{"owner_name": "a", VarVMName: "renamed", VarNamespace: "elsewhere"},
		},
	}
	d, err := p.build(spec, "ns")
	if err != nil {
		t.Fatal(err)
	}
	vm := d.vm
	if vm.Name != "desk-a" || vm.Namespace != "ns" {
		t.Fatalf("VM is %s/%s", vm.Namespace, vm.Name)
	}
	for k, v := range map[string]string{"desk": "a", "vm": "desk-a", "app.kubernetes.io/managed-by": "hyperfleet", LabelOwnerUID: "uid-1", LabelOwnerKind: "Desk", LabelInstallation: "prod-1", "team": "desk"} {
		if vm.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, vm.Labels[k], v)
		}
	}
	if vm.Spec.Template.ObjectMeta.Labels[LabelOwnerUID] != "uid-1" {
		t.Error("the instance template lacks the ownership label")
	}
	src := vm.Spec.Template.Spec.Volumes[1].CloudInitNoCloud
	if src.UserDataBase64 != "" || src.UserData != "" || src.UserDataSecretRef == nil || src.UserDataSecretRef.Name != "desk-a-cloudinit" {
		t.Fatalf("user data not moved into the Secret: %+v", src)
	}
	if d.secret == nil || string(d.secret.Data[UserDataKey]) != spec.CloudInit.UserData {
		t.Fatalf("Secret = %+v", d.secret)
	}
	if d.secret.Labels[LabelOwnerUID] != "uid-1" || d.secret.Labels[LabelInstallation] != "prod-1" {
		t.Error("the Secret lacks the ownership labels")
	}
	if len(vm.Spec.Template.Spec.Volumes) != 2 {
		t.Errorf("volumes = %d, want the template's 2", len(vm.Spec.Template.Spec.Volumes))
	}
	if len(d.notices) != 0 {
		t.Errorf("notices %v for a template that asks for the owner's namespace", d.notices)
	}
}

// A template naming another namespace (one written for another operator
// says "kubevirt") still makes the VM beside its owner, with a notice saying so.
func TestBuildKeepsTheVMBesideItsOwner(t *testing.T) {
	p := testProvider(t)
	d, err := p.build(providers.MachineSpec{
		Ref: providers.MachineRef{Name: "desk-a"}, Owner: providers.Owner{UID: "u"},
		KubeVirt: &providers.KubeVirtSpec{Template: []byte(strings.Replace(vmTemplate, "namespace: ${namespace}", "namespace: kubevirt", 1))},
	}, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	if d.vm.Namespace != "tenant-a" || d.secret.Namespace != "tenant-a" {
		t.Fatalf("VM in %q, Secret in %q; want both in the owner's namespace", d.vm.Namespace, d.secret.Namespace)
	}
	if len(d.notices) != 1 || !strings.Contains(d.notices[0], `metadata.namespace "kubevirt"`) || !strings.Contains(d.notices[0], `"tenant-a"`) {
		t.Errorf("notices %v, want one naming both namespaces", d.notices)
	}
}

func TestBuildAddsCloudInitAndRunStrategy(t *testing.T) {
	p := testProvider(t)
	tmpl := `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","spec":{"template":{"spec":{"domain":{"devices":{}}}}}}`
	spec := providers.MachineSpec{
		Ref: providers.MachineRef{Name: "hf-ns-c"}, Owner: providers.Owner{UID: "u"},
		Hostname: "runner-1", CPUCores: 2, MemoryMiB: 4096,
		CloudInit: providers.CloudInitSpec{User: "ubuntu", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA x"}},
		KubeVirt:  &providers.KubeVirtSpec{Template: []byte(tmpl), RunStrategy: "RerunOnFailure"},
	}
	d, err := p.build(spec, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if rs := d.vm.Spec.RunStrategy; rs == nil || *rs != kubevirtv1.RunStrategyRerunOnFailure {
		t.Errorf("runStrategy = %v", rs)
	}
	s := d.vm.Spec.Template.Spec
	if len(s.Volumes) != 1 || s.Volumes[0].CloudInitNoCloud == nil || len(s.Domain.Devices.Disks) != 1 {
		t.Fatalf("no cloud-init volume and disk added: %+v", s)
	}
	if s.Hostname != "runner-1" || s.Domain.CPU.Cores != 2 || s.Domain.Memory.Guest.Value() != 4096<<20 {
		t.Errorf("sizing/hostname not applied: %+v", s.Domain)
	}
	ud := string(d.secret.Data[UserDataKey])
	for _, want := range []string{"#cloud-config", "user: ubuntu", "ssh-ed25519 AAAA x", "hostname: runner-1"} {
		if !strings.Contains(ud, want) {
			t.Errorf("user data lacks %q:\n%s", want, ud)
		}
	}
}

func TestBuildErrorsNameTheProblem(t *testing.T) {
	p := testProvider(t)
	for name, tc := range map[string]struct{ tmpl, want string }{
		"unknown variable": {strings.Replace(vmTemplate, "app: desktop", "app: ${desk}", 1), "unknown variable ${desk}"},
		"unknown field":    {strings.Replace(vmTemplate, "running: true", "runnning: true", 1), "runnning"},
		"wrong kind":       {strings.Replace(vmTemplate, "kind: VirtualMachine", "kind: Pod", 1), `kind is "Pod"`},
		"no template":      {"apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nspec: {}\n", "spec.template"},
		"bad base64":       {strings.Replace(vmTemplate, "${user_data_base64}", "'!!'", 1), "not valid base64"},
		"never starts":     {strings.Replace(vmTemplate, "running: true", "running: false", 1), "would never start"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := p.build(providers.MachineSpec{
				Ref: providers.MachineRef{Name: "vm"}, Owner: providers.Owner{UID: "u"},
				KubeVirt: &providers.KubeVirtSpec{Template: []byte(tc.tmpl), TemplateSource: "ConfigMap sys/tmpl key template.yaml"},
			}, "ns")
			perm, ok := providers.IsPermanent(err)
			if !ok || perm.Reason != "TemplateInvalid" || !strings.Contains(perm.Message, tc.want) || !strings.Contains(perm.Message, "ConfigMap sys/tmpl") {
				t.Fatalf("error = %v, want TemplateInvalid naming %q and the source", err, tc.want)
			}
		})
	}
}

func TestMachineOf(t *testing.T) {
	always, rerun, once, manual := kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure, kubevirtv1.RunStrategyOnce, kubevirtv1.RunStrategyManual
	vm := func(rs *kubevirtv1.VirtualMachineRunStrategy) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "vmuid"}, Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: rs}}
	}
	vmi := func(phase kubevirtv1.VirtualMachineInstancePhase, ready bool) *kubevirtv1.VirtualMachineInstance {
		i := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: "i"}}
		i.Status.Phase, i.Status.NodeName = phase, "node-1"
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		i.Status.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstanceReady, Status: st}}
		i.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.7", IPs: []string{"10.0.0.7", "fd00::7", "fe80::1"}}}
		return i
	}
	cases := []struct {
		name  string
		vm    *kubevirtv1.VirtualMachine
		vmi   *kubevirtv1.VirtualMachineInstance
		state providers.PowerState
		addrs int
	}{
		{"no instance yet", vm(&always), nil, providers.PowerProvisioning, 0},
		{"no instance, RerunOnFailure restarting after a failure", vm(&rerun), nil, providers.PowerProvisioning, 0},
		{"no instance, Manual: nothing will start one", vm(&manual), nil, providers.PowerStopped, 0},
		{"scheduling", vm(&always), vmi(kubevirtv1.Scheduling, false), providers.PowerProvisioning, 0},
		{"running, guest not ready: no address yet", vm(&always), vmi(kubevirtv1.Running, false), providers.PowerRunning, 0},
		{"running and ready", vm(&always), vmi(kubevirtv1.Running, true), providers.PowerRunning, 2},
		{"guest shut down, Always restarts", vm(&always), vmi(kubevirtv1.Succeeded, false), providers.PowerProvisioning, 0},
		{"guest shut down, RerunOnFailure stays off", vm(&rerun), vmi(kubevirtv1.Succeeded, false), providers.PowerStopped, 0},
		{"failed, RerunOnFailure restarts", vm(&rerun), vmi(kubevirtv1.Failed, false), providers.PowerProvisioning, 0},
		{"failed, Once stays failed", vm(&once), vmi(kubevirtv1.Failed, false), providers.PowerFailed, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := machineOf(tc.vm, tc.vmi)
			if m.State != tc.state || len(m.Addresses) != tc.addrs {
				t.Fatalf("state %s addresses %v, want %s with %d addresses", m.State, m.Addresses, tc.state, tc.addrs)
			}
			if m.ProviderID != "kubevirt://ns/vm" || m.UID != "vmuid" || !m.Provisioned {
				t.Errorf("identity = %+v", m)
			}
			if tc.addrs > 0 && m.Addresses[0] != "10.0.0.7" {
				t.Errorf("first address = %s, want the IPv4 one", m.Addresses[0])
			}
		})
	}
	ended := vm(&rerun)
	ended.Status.RunStrategy = rerun
	ended.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusStarting
	if m := machineOf(ended, nil); m.State != providers.PowerProvisioning {
		t.Errorf("RerunOnFailure, instance made but not seen yet (Starting): %s, want Provisioning", m.State)
	}
	ended.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusStopped
	if m := machineOf(ended, nil); m.State != providers.PowerStopped {
		t.Errorf("RerunOnFailure after a clean end, no instance: %s, want Stopped", m.State)
	}
	ended.Status.StateChangeRequests = []kubevirtv1.VirtualMachineStateChangeRequest{{Action: kubevirtv1.StartRequest}}
	if m := machineOf(ended, nil); m.State != providers.PowerProvisioning {
		t.Errorf("RerunOnFailure with a start request (after a failure): %s, want Provisioning", m.State)
	}
	halted := vm(nil)
	f := false
	halted.Spec.Running = &f
	if m := machineOf(halted, nil); m.State != providers.PowerStopped {
		t.Errorf("running=false without an instance: %s, want Stopped", m.State)
	}
}

func TestUserDataNeverInTheVM(t *testing.T) {
	p := testProvider(t)
	secret := "TOKEN-abc123"
	for _, tmpl := range []string{vmTemplate, strings.Replace(vmTemplate, "userDataBase64: ${user_data_base64}", "userData: |\n              #cloud-config\n              token: "+secret, 1)} {
		d, err := p.build(providers.MachineSpec{
			Ref: providers.MachineRef{Name: "vm"}, Owner: providers.Owner{UID: "u"},
			CloudInit: providers.CloudInitSpec{UserData: "token: " + secret},
			KubeVirt:  &providers.KubeVirtSpec{Template: []byte(tmpl)},
		}, "ns")
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(d.vm)
		if err != nil {
			t.Fatal(err)
		}
		raw := string(data)
		if strings.Contains(raw, secret) || strings.Contains(raw, base64.StdEncoding.EncodeToString([]byte("token: "+secret))) {
			t.Fatal("user data left in the VirtualMachine object")
		}
		if !strings.Contains(string(d.secret.Data[UserDataKey]), secret) {
			t.Fatal("user data not in the Secret")
		}
	}
}

// The ownership rule: the owner's UID, and this installation's label or
// none (made before installations).
func TestOwnership(t *testing.T) {
	owner := providers.Owner{UID: "uid-1"}
	obj := func(labels map[string]string) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
	}
	cases := []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"owner and installation", map[string]string{LabelOwnerUID: "uid-1", LabelInstallation: "prod-1"}, true},
		{"made before installations", map[string]string{LabelOwnerUID: "uid-1"}, true},
		{"another installation", map[string]string{LabelOwnerUID: "uid-1", LabelInstallation: "dev-1"}, false},
		{"an empty installation label is another's", map[string]string{LabelOwnerUID: "uid-1", LabelInstallation: ""}, false},
		{"another owner", map[string]string{LabelOwnerUID: "uid-2", LabelInstallation: "prod-1"}, false},
		{"no marks", nil, false},
	}
	for _, tc := range cases {
		if got := ownedBy(obj(tc.labels), owner, "prod-1"); got != tc.want {
			t.Errorf("%s: ownedBy = %v, want %v", tc.name, got, tc.want)
		}
	}
	if ownedBy(obj(map[string]string{LabelOwnerUID: ""}), providers.Owner{}, "prod-1") {
		t.Error("an empty owner UID owns nothing")
	}
}

// A VM made halted for its Secret remembers the strategy it starts with,
// whatever form the template gave it in, and reads as starting, not stopped.
func TestHoldForUserData(t *testing.T) {
	yes, once := true, kubevirtv1.RunStrategyOnce
	for name, tc := range map[string]struct {
		spec kubevirtv1.VirtualMachineSpec
		want kubevirtv1.VirtualMachineRunStrategy
	}{
		"running: true":          {kubevirtv1.VirtualMachineSpec{Running: &yes}, kubevirtv1.RunStrategyAlways},
		"runStrategy Once":       {kubevirtv1.VirtualMachineSpec{RunStrategy: &once}, kubevirtv1.RunStrategyOnce},
		"neither (KubeVirt: on)": {kubevirtv1.VirtualMachineSpec{}, kubevirtv1.RunStrategyAlways},
	} {
		t.Run(name, func(t *testing.T) {
			vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", UID: "u"}, Spec: tc.spec}
			holdForUserData(vm)
			if vm.Spec.Running != nil || vm.Spec.RunStrategy == nil || *vm.Spec.RunStrategy != kubevirtv1.RunStrategyHalted {
				t.Fatalf("held VM spec %+v, want runStrategy Halted only", vm.Spec)
			}
			if got := vm.Annotations[AnnotationStartStrategy]; got != string(tc.want) {
				t.Errorf("remembered strategy %q, want %q", got, tc.want)
			}
			if !heldForUserData(vm) {
				t.Error("heldForUserData = false on a held VM")
			}
			if m := machineOf(vm, nil); m.State != providers.PowerProvisioning || m.Provisioned {
				t.Errorf("held VM reads as %s (%s), provisioned %v; want provisioning with Create's step left", m.State, m.Progress, m.Provisioned)
			}
		})
	}
}
