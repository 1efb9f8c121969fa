package conditions

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

func TestStatusMergePatch(t *testing.T) {
	base := func() *hypervisorv1alpha1.MachineClaim {
		return &hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Labels: map[string]string{"a": "b"}},
			Status: hypervisorv1alpha1.MachineClaimStatus{
				Phase:      hypervisorv1alpha1.MachineProvisioning,
				Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Cloning", Message: "cloning"}},
			},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*hypervisorv1alpha1.MachineClaim)
		want   string
	}{
		{"nothing changed", func(*hypervisorv1alpha1.MachineClaim) {}, ""},
		{"only metadata and spec changed: the status subresource would ignore them", func(mc *hypervisorv1alpha1.MachineClaim) {
			mc.Labels["a"] = "c"
			mc.Spec.TemplateRef.Name = "other"
		}, ""},
		{"a field changed", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Status.Phase = hypervisorv1alpha1.MachineReady },
			`{"status":{"phase":"Ready"}}`},
		{"a field removed is nulled", func(mc *hypervisorv1alpha1.MachineClaim) { mc.Status.Phase = "" },
			`{"status":{"phase":null}}`},
		{"a list is replaced whole, as merge patches do", func(mc *hypervisorv1alpha1.MachineClaim) {
			mc.Status.Conditions[0].Reason = "Booting"
		}, `{"status":{"conditions":[{"lastTransitionTime":null,"message":"cloning","reason":"Booting","status":"False","type":"Ready"}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := base(), base()
			tc.change(after)
			got, err := StatusMergePatch(before, after)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("patch = %s, want %s", got, tc.want)
			}
		})
	}
}
