package machineclaim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// The tracker keeps the first time a machine was seen running and the
// latest node it was seen on, so a booting claim's next look goes straight
// to that node; forgetting it drops both.
func TestBootingKeepsTheFirstSightAndTheNode(t *testing.T) {
	var b booting
	a := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "a"}}
	bc := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "b"}}
	t0 := time.Unix(1000, 0)
	if b.known(a) || b.node(a) != "" {
		t.Fatal("an empty tracker knows a claim")
	}
	if got := b.seen(a, t0, "pve1"); !got.Equal(t0) {
		t.Errorf("first sight %v, want %v", got, t0)
	}
	if got := b.seen(a, t0.Add(time.Second), ""); !got.Equal(t0) || b.node(a) != "pve1" {
		t.Errorf("after a look that named no node: since %v node %q, want %v pve1", got, b.node(a), t0)
	}
	if got := b.seen(a, t0.Add(2*time.Second), "pve2"); !got.Equal(t0) || b.node(a) != "pve2" {
		t.Errorf("after a migration: since %v node %q, want %v pve2", got, b.node(a), t0)
	}
	if b.node(bc) != "" {
		t.Errorf("claim b has node %q from claim a", b.node(bc))
	}
	b.forget(a)
	if b.known(a) || b.node(a) != "" {
		t.Error("a forgotten claim is still known")
	}
}
