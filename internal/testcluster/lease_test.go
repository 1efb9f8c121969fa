package testcluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

func TestMain(m *testing.M) { testenv.MainWith(m, testcluster.Around(testenv.Config, nil)) }

// Every simulated node renews its Lease as a kubelet does. Without Leases the
// node-lifecycle controller judges a node by its status heartbeats alone,
// which kwok posts less often than the controller's grace period: it then
// marks every Pod on the node not Ready about 50 s after the cluster starts,
// and Performers that were Ready turn PodStarting with nothing wrong.
func TestNodesRenewTheirLeases(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(testenv.Config())
	ctx := context.Background()
	first := map[string]time.Time{}
	for _, name := range testcluster.Nodes() {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node %s has no Lease: %v", name.Name, err)
		}
		if l.Spec.RenewTime == nil {
			t.Fatalf("node %s: Lease never renewed", name.Name)
		}
		first[name.Name] = l.Spec.RenewTime.Time
	}
	for name, at := range first {
		eventually.That(t, 30*time.Second, func() (bool, string) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime.After(at), "renewed at " + l.Spec.RenewTime.Format(time.RFC3339) + ", first seen " + at.Format(time.RFC3339)
		})
	}
}
