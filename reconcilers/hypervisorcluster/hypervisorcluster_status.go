package hypervisorcluster

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// Ready reasons of a HypervisorCluster, beside the providers' own
// (AuthenticationFailed, TLSVerificationFailed, HypervisorUnreachable, …).
const (
	ReasonConnected = "Connected"
)

// setStatus computes every status field this reconciler owns from obs.
func (r *Reconciler) setStatus(c *hypervisorv1alpha1.HypervisorCluster, obs observation) {
	c.Status.ObservedGeneration = c.Generation
	if obs.err == nil && obs.info != nil {
		online := 0
		for _, n := range obs.info.nodes {
			if n.Online {
				online++
			}
		}
		c.Status.Version = obs.info.version
		c.Status.Nodes = obs.info.nodes
		c.Status.Machines = int32(obs.info.machines) //nolint:gosec // machine counts fit int32
		now := metav1.NewTime(r.Clock.Now())
		c.Status.LastCheckTime = &now
		conditions.Set(c, c.Generation, conditions.Summary{
			State: conditions.Ready, Reason: ReasonConnected,
			Message: fmt.Sprintf("%s %s answers; %d of %d nodes online", c.Spec.Provider, obs.info.version, online, len(obs.info.nodes)),
		})
		return
	}
	if p, ok := providers.IsPermanent(obs.err); ok {
		conditions.Set(c, c.Generation, conditions.Summary{State: conditions.Stalled, Reason: p.Reason, Message: p.Message})
		return
	}
	reason := "HypervisorUnreachable"
	var t *providers.TransientError
	if errors.As(obs.err, &t) && t.Reason != "" {
		reason = t.Reason
	}
	conditions.Set(c, c.Generation, conditions.Summary{
		State: conditions.Waiting, Reason: reason,
		Message: fmt.Sprintf("cannot reach %s: %v; retrying", c.Spec.Endpoint, obs.err),
	})
}
