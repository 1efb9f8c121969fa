package cyberdesk_test

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/reconcilers/cyberdesk"
)

// The original operator's ConfigMap, verbatim (its only key is
// kubevirt-vm-cr.yaml, its VM sets metadata.namespace: kubevirt and the
// older spec.running: true), gives a Running desk. Its labels are kept;
// its namespace is not used, and a Warning event says so.
func TestOriginalTemplateConfigMapGivesARunningDesk(t *testing.T) {
	raw, err := os.ReadFile("testdata/kubevirt-vm-cr.yaml")
	if err != nil {
		t.Fatal(err)
	}
	original := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(raw, original); err != nil {
		t.Fatal(err)
	}
	if len(original.Data) != 1 || original.Data["kubevirt-vm-cr.yaml"] == "" {
		t.Fatalf("fixture data keys %v, want only kubevirt-vm-cr.yaml", original.Data)
	}
	if err := setTemplateData(rootCtx, original.Data); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := resetTemplate(rootCtx); err != nil {
			t.Error(err)
		}
	})

	l := newLab(t)
	l.desk("legacy", 3600000)
	d := l.waitPhase("legacy", cyberdeskv1alpha1.CyberdeskRunning, time.Minute)
	if ref := d.Status.VirtualMachineRef; ref == nil || ref.Namespace != l.ns {
		t.Fatalf("virtualMachineRef = %+v, want the VM beside the desk in %s", ref, l.ns)
	}

	vm := &kubevirtv1.VirtualMachine{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-legacy"}, vm); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"app": "cyberdesk", "cyberdesk-instance": "legacy", "managed-by": "cyberdesk-operator"} {
		if vm.Labels[k] != v {
			t.Errorf("VM label %s = %q, want %q (the original's labels are kept)", k, vm.Labels[k], v)
		}
	}
	if vm.Spec.Template.ObjectMeta.Labels["kubevirt.io/domain"] != "cyberdesk-legacy" {
		t.Errorf("instance labels %v, want the template's kubevirt.io/domain", vm.Spec.Template.ObjectMeta.Labels)
	}
	if rs := vm.Spec.RunStrategy; vm.Spec.Running != nil || rs == nil || *rs != kubevirtv1.RunStrategyAlways {
		t.Errorf("running %v, runStrategy %v: want spec.running: true read as runStrategy Always", vm.Spec.Running, rs)
	}
	// The template's inline user data moved to the VM's own Secret.
	secret := &corev1.Secret{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "cyberdesk-legacy-cloudinit"}, secret); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(secret.Data[kubevirt.UserDataKey]), "kubevirt-admin") {
		t.Error("the template's inline user data is not in the VM's cloud-init Secret")
	}

	eventually.That(t, 30*time.Second, func() (bool, string) {
		var list eventsv1.EventList
		if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Regarding.Name == "legacy" && e.Type == corev1.EventTypeWarning && e.Reason == cyberdesk.ReasonTemplateAdjusted &&
				strings.Contains(e.Note, `metadata.namespace "kubevirt"`) && strings.Contains(e.Note, l.ns) {
				return true, ""
			}
		}
		return false, "no TemplateAdjusted Warning naming the template's namespace"
	})
}
