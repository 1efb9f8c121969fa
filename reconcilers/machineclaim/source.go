package machineclaim

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Source stands in for a HypervisorMachineTemplate and its HypervisorCluster
// for the claims whose spec.templateRef names another kind. It lets a kind
// that promises its users its own template and hypervisor (a Cyberdesk: the
// operator's template ConfigMap, the operator's own KubeVirt) make its
// machine through a claim, and so through the one lifecycle, deadline path
// and orphan sweeper every machine has.
type Source interface {
	// Hypervisor is the provider the claims' machines are on, and the name
	// their status.clusterName shows. It needs no referent: a claim whose
	// Cyberdesk is gone still deletes its machine through it.
	Hypervisor() (p providers.Hypervisor, cluster string, provider hypervisorv1alpha1.ProviderType)
	// Template returns what the claim's machine is made from. It is never
	// written; a KubeVirt template ConfigMap it names is read in its
	// namespace. A providers.Permanent error stalls the claim with its
	// message; any other error is retried.
	Template(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) (*hypervisorv1alpha1.HypervisorMachineTemplate, error)
}

// ReasonNoSource: spec.templateRef names a kind this operator makes no
// machines for (its reconciler is off).
const ReasonNoSource = "TemplateKindNotServed"

// source returns the Source of a claim whose templateRef names a kind other
// than HypervisorMachineTemplate.
func (r *Reconciler) source(c *hypervisorv1alpha1.MachineClaim) (Source, error) {
	group, kind := c.Spec.TemplateRef.GroupKind()
	if src, ok := r.Sources[schema.GroupKind{Group: group, Kind: kind}]; ok {
		return src, nil
	}
	return nil, providers.Permanent(ReasonNoSource, fmt.Sprintf(
		"spec.templateRef names a %s.%s, and this operator makes no machines from that kind (its reconciler is not enabled); enable it, or delete this claim", kind, group), nil)
}

// resolveSource is resolve for a claim made from a Source.
func (r *Reconciler) resolveSource(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.claim
	src, err := r.source(c)
	if err != nil {
		s.blocked = &blocker{state: conditions.Stalled, reason: ReasonNoSource, message: err.Error()}
		return skeleton.StopAndRequeue(time.Minute), nil
	}
	t, err := src.Template(ctx, c)
	if err != nil {
		return r.providerError(s, err)
	}
	p, cluster, provider := src.Hypervisor()
	s.template, s.provider = t, p
	c.Status.ClusterName, c.Status.Provider = cluster, provider
	return skeleton.Continue(), nil
}
