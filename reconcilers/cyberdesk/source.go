package cyberdesk

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
)

// ClusterName is what a desk's claim shows as status.clusterName: its
// machine is on the operator's own KubeVirt, not on a HypervisorCluster.
const ClusterName = "cyberdesk-kubevirt"

// Source makes the machine of each desk's MachineClaim (a
// machineclaim.Source for kind Cyberdesk): from the Cyberdesk template
// ConfigMap in the operator's namespace, as it is when the machine is made,
// on the operator's own KubeVirt. Both are the operator's: nothing a desk
// or a claim says chooses another template, namespace or cluster.
type Source struct {
	// Reader reads the desks (the manager's cache).
	Reader client.Reader
	// Provider is the operator's KubeVirt, its machines labelled with
	// OwnerKind.
	Provider providers.Hypervisor
	// TemplateConfigMap and TemplateKey locate the VirtualMachine template.
	TemplateConfigMap types.NamespacedName
	TemplateKey       string
	// Standby is the hot desk machines kept per namespace.
	Standby Standby
}

// Hypervisor is the operator's KubeVirt.
func (s *Source) Hypervisor() (providers.Hypervisor, string, hypervisorv1alpha1.ProviderType) {
	return s.Provider, ClusterName, hypervisorv1alpha1.ProviderKubeVirt
}

// ReasonNotTheDesksClaim: a claim names a Cyberdesk that does not control
// it. Only a desk's own claim is made from the desk template.
const ReasonNotTheDesksClaim = "NotTheCyberdesksClaim"

// Template is the desk template for the claim of the Cyberdesk it names,
// if that desk controls the claim. The template is held in memory only; it
// lives in the operator's namespace so its ConfigMap is read there.
//
// A desk standby claim (StandbyKeeper's) names no desk: it is made from the
// template as it is; a namespace the operator keeps none in has its
// standby claims deleted by the keeper.
func (s *Source) Template(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) (*hypervisorv1alpha1.HypervisorMachineTemplate, error) {
	if isDeskStandby(claim) {
		return s.Standby.template(claim.Namespace, s.TemplateConfigMap, s.TemplateKey), nil
	}
	desk := &cyberdeskv1alpha1.Cyberdesk{}
	err := s.Reader.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: claim.Spec.TemplateRef.Name}, desk)
	switch {
	case apierrors.IsNotFound(err):
		return nil, providers.Permanent(ReasonNotTheDesksClaim, fmt.Sprintf(
			"Cyberdesk %s (spec.templateRef) does not exist; a desk makes its own claim, so delete this one", claim.Spec.TemplateRef.Name), err)
	case err != nil:
		return nil, providers.Transient("CyberdeskUnreadable", 0, fmt.Errorf("reading Cyberdesk %s: %w", claim.Spec.TemplateRef.Name, err))
	}
	if !metav1.IsControlledBy(claim, desk) {
		return nil, providers.Permanent(ReasonNotTheDesksClaim, fmt.Sprintf(
			"Cyberdesk %s (spec.templateRef) does not control this claim: only a desk's own claim is made from the desk template; create a Cyberdesk instead", desk.Name), nil)
	}
	// Carries the namespace's standby: a desk's claim that fits takes a
	// hot machine (standby.Fits).
	return s.Standby.template(claim.Namespace, s.TemplateConfigMap, s.TemplateKey), nil
}
