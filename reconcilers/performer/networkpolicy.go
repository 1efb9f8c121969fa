package performer

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/serverside"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// ReasonObjectConflict: an object the Performer makes (its NetworkPolicy)
// has a name someone else's object already holds.
const ReasonObjectConflict = "ObjectConflict"

// The executor Pods a performer's gRPC port admits, by the labels they
// carry: an HourglassExecutor's Deployment (reconcilers/executor), and the
// original Hourglass executor chart's StatefulSet, which the original's
// users deploy themselves.
var executorPeers = []map[string]string{
	{LabelApp: "hourglass-executor"},
	{"app.kubernetes.io/part-of": "hourglass", "component": "executor"},
}

// NetworkPolicyName is the Performer's NetworkPolicy: performer-<name>,
// beside the Service of the same name.
func NetworkPolicyName(performerName string) string { return ServiceName(performerName) }

// isolate keeps the NetworkPolicy that lets only executor Pods of the
// Performer's namespace reach its Pods' gRPC port. The Performer owns it,
// not the HourglassExecutor: performers are as often made by an executor
// HyperFleet does not run (ponos creates them itself), it lives and goes
// with its Performer (the garbage collector), and its port follows
// grpcPort in the reconcile that moves the Service. A failure here does
// not hold up the roll: the performer still serves, only unisolated.
func (r *Reconciler) isolate(ctx context.Context, s *scope) (skeleton.Result, error) {
	p := s.perf
	want, err := r.desiredNetworkPolicy(p)
	if err != nil {
		return skeleton.Continue(), err
	}
	have := &networkingv1.NetworkPolicy{}
	key := client.ObjectKeyFromObject(want)
	err = r.Client.Get(ctx, key, have)
	if apierrors.IsNotFound(err) {
		// The cache holds only the operator's; someone else's of this name
		// is refused, not taken over (see ensureService).
		err = r.APIReader.Get(ctx, key, have)
	}
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return skeleton.Continue(), fmt.Errorf("reading the NetworkPolicy: %w", err)
	case !metav1.IsControlledBy(have, p):
		s.serviceConflict = &specError{reason: ReasonObjectConflict, message: fmt.Sprintf(
			"NetworkPolicy %s exists and is not managed by this Performer: delete or rename it so the operator can make its own", have.Name)}
		return skeleton.Continue(), nil
	case apiequality.Semantic.DeepEqual(have.Spec, want.Spec) && labelsInclude(have.Labels, want.Labels):
		return skeleton.Continue(), nil
	}
	if err := serverside.Apply(ctx, r.Client, FieldOwner, want); err != nil {
		return skeleton.Continue(), fmt.Errorf("applying the NetworkPolicy: %w", err)
	}
	return skeleton.Continue(), nil
}

func (r *Reconciler) desiredNetworkPolicy(p *hourglassv1alpha1.Performer) (*networkingv1.NetworkPolicy, error) {
	var from []networkingv1.NetworkPolicyPeer
	for _, peer := range executorPeers {
		from = append(from, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(peer)}})
	}
	// The port by name: each Pod's own, so during a port change the old
	// revision stays reachable on its port until the new one serves.
	port := intstr.FromString(portName)
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      NetworkPolicyName(p.Name),
			Namespace: p.Namespace,
			Labels:    commonLabels(p),
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selectorLabels(p)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  from,
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
	if err := controllerutil.SetControllerReference(p, np, r.Scheme); err != nil {
		return nil, err
	}
	return np, nil
}

func labelsInclude(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
