package hypervisorcluster

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// What a deleting cluster waits for: claims that have, or may still begin,
// a machine on it.
func TestMayHoldMachine(t *testing.T) {
	now := metav1.Now()
	vmid := int32(100)
	saw := []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionFalse, Reason: claimClusterDeleting}}
	waiting := []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionFalse, Reason: "DependencyNotReady"}}
	for _, tt := range []struct {
		name  string
		claim hypervisorv1alpha1.MachineClaim
		want  bool
	}{
		{"a machine recorded", hypervisorv1alpha1.MachineClaim{Status: hypervisorv1alpha1.MachineClaimStatus{MachineName: "vm-a"}}, true},
		{"a VMID recorded", hypervisorv1alpha1.MachineClaim{Status: hypervisorv1alpha1.MachineClaimStatus{VMID: &vmid}}, true},
		{"being deleted with its machine", hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now},
			Status: hypervisorv1alpha1.MachineClaimStatus{MachineName: "vm-a"}}, true},
		{"new, not reconciled yet", hypervisorv1alpha1.MachineClaim{}, true},
		{"waiting on something else", hypervisorv1alpha1.MachineClaim{Status: hypervisorv1alpha1.MachineClaimStatus{Conditions: waiting}}, true},
		{"saw the cluster deleting", hypervisorv1alpha1.MachineClaim{Status: hypervisorv1alpha1.MachineClaimStatus{Conditions: saw}}, false},
		{"deleted before any machine", hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false},
		{"terminated", hypervisorv1alpha1.MachineClaim{Status: hypervisorv1alpha1.MachineClaimStatus{MachineName: "vm-a", Phase: hypervisorv1alpha1.MachineTerminated}}, false},
		{"failed", hypervisorv1alpha1.MachineClaim{Status: hypervisorv1alpha1.MachineClaimStatus{MachineName: "vm-a", Phase: hypervisorv1alpha1.MachineFailed}}, false},
	} {
		if got := mayHoldMachine(&tt.claim); got != tt.want {
			t.Errorf("%s: mayHoldMachine = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestIndexMachines(t *testing.T) {
	c := &hypervisorv1alpha1.MachineClaim{Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}}}
	if got := indexMachines(c); !slices.Equal(got, []string{"template/ubuntu"}) {
		t.Errorf("unresolved claim indexed as %v", got)
	}
	c.Status.ClusterName = "pve"
	if got := indexMachines(c); !slices.Equal(got, []string{"template/ubuntu", "pve"}) {
		t.Errorf("resolved claim indexed as %v", got)
	}
}

// The Secrets a cluster holds: its credentials and a Secret CA bundle, not
// a ConfigMap one; the record survives spaces and duplicates.
func TestReferencedAndHeldSecrets(t *testing.T) {
	c := &hypervisorv1alpha1.HypervisorCluster{Spec: hypervisorv1alpha1.HypervisorClusterSpec{
		CredentialsRef: &meta.LocalObjectReference{Name: "token"},
		TLS:            &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "ca", Key: "ca.crt"}},
	}}
	if got := referencedSecrets(c); !slices.Equal(got, []string{"ca", "token"}) {
		t.Errorf("referenced %v", got)
	}
	c.Spec.TLS.CABundleRef.Kind = meta.ConfigMapKind
	if got := referencedSecrets(c); !slices.Equal(got, []string{"token"}) {
		t.Errorf("referenced with a ConfigMap CA bundle: %v", got)
	}
	c.Annotations = map[string]string{HeldSecretsAnnotation: " token,old,,token "}
	if got := heldSecrets(c); !slices.Equal(got, []string{"old", "token"}) {
		t.Errorf("held %v", got)
	}
}
