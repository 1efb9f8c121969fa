package hypervisorcluster

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Ready reasons of a HypervisorCluster, beside the providers' own
// (AuthenticationFailed, TLSVerificationFailed, HypervisorUnreachable, …).
const (
	ReasonConnected = "Connected"
	// ReasonUnreachable is a transient failure that names no reason of its own.
	ReasonUnreachable = "HypervisorUnreachable"
	// ReasonWaitingForMachines: the cluster is deleted and machines made
	// through it are still being deleted.
	ReasonWaitingForMachines = "WaitingForMachines"
	// ReasonDeletionRetrying: the deleted cluster's cleanup failed a step
	// and is retried.
	ReasonDeletionRetrying = "DeletionRetrying"
)

// computeStatus sets the status fields this reconciler owns from what the
// phases observed, and returns the conditions' summary:
//   - the hypervisor answered: Ready/Connected, with version, nodes, machine
//     count and lastCheckTime;
//   - a permanent failure (bad credentials, an untrusted certificate, a
//     missing Secret): Stalled with the provider's reason, retried all the
//     same since an unwatched Secret may be fixed;
//   - a transient one: Waiting, retried;
//   - deleted with machines left on it: Progressing/WaitingForMachines,
//     naming them.
//
// It is pure: the time comes from the scope, and no message carries one.
func computeStatus(s *scope, err error) conditions.Summary {
	c := s.cluster
	if d := s.deleting; d != nil {
		return conditions.Summary{
			State: conditions.Progressing, Reason: ReasonWaitingForMachines,
			Message: fmt.Sprintf("deleted; waiting for the machines of %s to be deleted (released at the latest %s after deletion, leaving the rest)",
				d.describe(), d.timeout),
		}
	}
	if !c.DeletionTimestamp.IsZero() && err != nil {
		// The cleanup could not tell what is left (or let go of a Secret):
		// retried, and bounded by the deletion deadline all the same.
		return conditions.Summary{State: conditions.Waiting, Reason: ReasonDeletionRetrying,
			Message: fmt.Sprintf("deleted; retrying the cleanup: %v", err)}
	}
	failure := s.failure
	if failure == nil {
		failure = err
	}
	if failure == nil && s.answer != nil {
		a := s.answer
		online := 0
		for _, n := range a.nodes {
			if n.Online {
				online++
			}
		}
		c.Status.Version = a.version
		c.Status.Nodes = a.nodes
		c.Status.Machines = int32(a.machines) //nolint:gosec // machine counts fit int32
		now := metav1.NewTime(s.now)
		c.Status.LastCheckTime = &now
		msg := fmt.Sprintf("%s %s answers; %d of %d nodes online", c.Spec.Provider, a.version, online, len(a.nodes))
		if len(s.secretsDeleting) > 0 {
			msg += fmt.Sprintf("; Secret %s is being deleted and kept readable until this cluster is deleted",
				strings.Join(s.secretsDeleting, ", "))
		}
		return conditions.Summary{State: conditions.Ready, Reason: ReasonConnected, Message: msg}
	}
	if failure == nil {
		// No phase concluded anything (there is none that can end so today):
		// leave the conditions as they are.
		return conditions.Summary{}
	}
	if p, ok := providers.IsPermanent(failure); ok {
		return conditions.Summary{State: conditions.Stalled, Reason: p.Reason, Message: p.Message}
	}
	reason := ReasonUnreachable
	var t *providers.TransientError
	if errors.As(failure, &t) && t.Reason != "" {
		reason = t.Reason
	}
	return conditions.Summary{
		State: conditions.Waiting, Reason: reason,
		Message: fmt.Sprintf("cannot reach %s: %v; retrying", c.Spec.Endpoint, failure),
	}
}

// recordEvents is the cluster's event policy: one event each time the Ready
// reason changes, a Warning unless the cluster is now Ready or waiting for
// its machines' deletion (what was asked for). Releasing the cluster has
// its own events (finalize).
func (r *Reconciler) recordEvents(_ *scope, before, after *hypervisorv1alpha1.HypervisorCluster, _ conditions.Summary) {
	if !after.DeletionTimestamp.IsZero() {
		reason, _ := conditions.ReadyMessage(after)
		skeleton.ReasonEvent(r.Recorder, before, after, "Delete", reason != ReasonWaitingForMachines)
		return
	}
	skeleton.ReasonEvent(r.Recorder, before, after, "Check", !conditions.IsReady(after, after.Generation))
}
