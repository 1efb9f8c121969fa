package sandbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
)

// checkCluster asserts what `kubectl get nodes` and `kubectl get
// endpointslices` show after `make dev` (docs/sandbox.md): every
// simulated node Ready, and a ready endpoint behind each sample Performer's
// Service. That the Performers and the executor are Ready is
// checkEveryObjectReady's.
func checkCluster(t *testing.T, c client.Client, namespace string) {
	t.Helper()
	ctx := context.Background()
	eventually.That(t, 60*time.Second, func() (bool, string) {
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(testcluster.Nodes()), fmt.Sprintf("%d of %d nodes Ready", ready, len(testcluster.Nodes()))
	})
	var performers hourglassv1alpha1.PerformerList
	if err := c.List(ctx, &performers, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	if len(performers.Items) == 0 {
		t.Fatalf("no sample Performers in namespace %s", namespace)
	}
	for _, p := range performers.Items {
		eventually.That(t, 30*time.Second, func() (bool, string) {
			var slices discoveryv1.EndpointSliceList
			if err := c.List(ctx, &slices, client.InNamespace(namespace),
				client.MatchingLabels{discoveryv1.LabelServiceName: p.Status.ServiceName}); err != nil {
				return false, err.Error()
			}
			for _, s := range slices.Items {
				for _, ep := range s.Endpoints {
					if ep.Conditions.Ready != nil && *ep.Conditions.Ready && len(ep.Addresses) > 0 {
						return true, ""
					}
				}
			}
			return false, fmt.Sprintf("Service %q of Performer %s has no ready endpoint", p.Status.ServiceName, p.Name)
		})
	}
}
