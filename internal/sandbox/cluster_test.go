package sandbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
)

// checkCluster asserts what `kubectl get nodes`, `kubectl get
// performers,hourglassexecutors -A` and `kubectl get endpointslices` show
// after `make dev` (the README's sandbox section).
func checkCluster(t *testing.T, c client.Client) {
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
	eventually.That(t, 90*time.Second, func() (bool, string) {
		if err := c.List(ctx, &performers, client.InNamespace("samples")); err != nil {
			return false, err.Error()
		}
		var executors hourglassv1alpha1.HourglassExecutorList
		if err := c.List(ctx, &executors, client.InNamespace("samples")); err != nil {
			return false, err.Error()
		}
		for i := range performers.Items {
			if !apimeta.IsStatusConditionTrue(performers.Items[i].Status.Conditions, meta.ReadyCondition) {
				return false, fmt.Sprintf("Performer %s: %+v", performers.Items[i].Name, performers.Items[i].Status.Conditions)
			}
		}
		for i := range executors.Items {
			if !apimeta.IsStatusConditionTrue(executors.Items[i].Status.Conditions, meta.ReadyCondition) {
				return false, fmt.Sprintf("HourglassExecutor %s: %+v", executors.Items[i].Name, executors.Items[i].Status.Conditions)
			}
		}
		return len(performers.Items) > 0 && len(executors.Items) > 0, "no sample Performers or executors"
	})
	for _, p := range performers.Items {
		eventually.That(t, 30*time.Second, func() (bool, string) {
			var slices discoveryv1.EndpointSliceList
			if err := c.List(ctx, &slices, client.InNamespace("samples"),
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
			return false, fmt.Sprintf("Service %s of Performer %s has no ready endpoint", p.Status.ServiceName, p.Name)
		})
	}
}
