package hypervisormachinetemplate

import (
	"fmt"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Ready reasons of a HypervisorMachineTemplate, beside the shared ones
// (DependencyNotFound, DependencyNotReady, InvalidSpec, Succeeded) and the
// providers' own (SourceNotFound, TemplateInvalid, …).
const (
	ReasonSourceFound       = "SourceFound"
	ReasonClusterUnreadable = "ClusterUnreadable"
	ReasonUnreachable       = "HypervisorUnreachable"
)

// computeStatus sets status.provider and status.resolvedSource from what the
// phases observed and returns the conditions' summary, from the first fact
// that blocks: the cluster missing or unreadable, a provider section that
// does not fit it, the cluster not Ready, its provider not buildable, the
// source not found or not checkable. It is pure.
func computeStatus(s *scope, _ error) conditions.Summary {
	t := s.template
	if s.cluster != nil {
		t.Status.Provider = s.cluster.Spec.Provider
	}
	if s.source != "" {
		t.Status.ResolvedSource = s.source
	}
	t.Status.Standby = s.standby
	name := s.clusterKey.Name
	switch {
	case s.standbyErr != nil:
		return conditions.Summary{State: conditions.Stalled, Reason: meta.InvalidSpecReason, Message: s.standbyErr.Error() + "; no standby machine is made or retired until it is fixed"}
	case s.clusterErr != nil:
		return conditions.Summary{State: conditions.Waiting, Reason: ReasonClusterUnreadable, Message: s.clusterErr.Error()}
	case s.clusterMissing:
		return conditions.Summary{State: conditions.Waiting, Reason: meta.DependencyNotFoundReason,
			Message: fmt.Sprintf("HypervisorCluster %s (spec.clusterRef) not found", name)}
	case s.cluster == nil:
		// No phase ran far enough to conclude anything: leave the conditions
		// as they are (the reconcile's error, if any, is retried).
		return conditions.Summary{}
	case s.mismatch != "":
		return conditions.Summary{State: conditions.Stalled, Reason: meta.InvalidSpecReason, Message: s.mismatch}
	case !s.clusterReady:
		return conditions.Summary{State: conditions.Waiting, Reason: meta.DependencyNotReadyReason,
			Message: fmt.Sprintf("HypervisorCluster %s is not Ready: %s", name, notReadyBecause(s.cluster))}
	case s.providerErr != nil:
		return conditions.Summary{State: conditions.Waiting, Reason: meta.DependencyNotReadyReason, Message: s.providerErr.Error()}
	case s.uncheckable:
		return conditions.Summary{State: conditions.Ready, Reason: meta.SucceededReason, Message: "template accepted"}
	case s.sourceErr != nil:
		if perm, ok := providers.IsPermanent(s.sourceErr); ok {
			return conditions.Summary{State: conditions.Stalled, Reason: perm.Reason, Message: perm.Message}
		}
		return conditions.Summary{State: conditions.Waiting, Reason: ReasonUnreachable, Message: s.sourceErr.Error()}
	case s.source != "":
		return conditions.Summary{State: conditions.Ready, Reason: ReasonSourceFound, Message: "source " + s.source + " found"}
	}
	return conditions.Summary{}
}

// notReadyBecause is the cluster's own Ready message.
func notReadyBecause(c *hypervisorv1alpha1.HypervisorCluster) string {
	if _, why := conditions.ReadyMessage(c); why != "" {
		return why
	}
	return "its first check has not finished"
}

// recordEvents is the template's event policy: one event each time the Ready
// reason changes, a Warning unless the template is now Ready.
func (r *Reconciler) recordEvents(_ *scope, before, after *hypervisorv1alpha1.HypervisorMachineTemplate, _ conditions.Summary) {
	skeleton.ReasonEvent(r.Recorder, before, after, "Check", !conditions.IsReady(after, after.Generation))
}
