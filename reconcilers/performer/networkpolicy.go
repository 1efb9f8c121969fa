package performer

import (
	"context"
	"fmt"
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/serverside"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// ReasonObjectConflict: an object the Performer needs (its Service, or the
// namespace's performer NetworkPolicy) has a name someone else's object
// already holds.
const ReasonObjectConflict = "ObjectConflict"

// NetworkPolicyName is the one NetworkPolicy of a namespace's performers.
// One per namespace, not one per Performer: every performer Pod names its
// gRPC port "grpc", so one policy selecting them all admits the executors
// to each Pod's own port, and a Performer costs no write for it (a
// thousand Performers made at once cost one, not a thousand:
// make bench-performers).
const NetworkPolicyName = "hourglass-performers"

// The executor Pods a performer's gRPC port admits, by the labels they
// carry: an HourglassExecutor's Deployment (reconcilers/executor), and the
// original Hourglass executor chart's StatefulSet, which the original's
// users deploy themselves.
var executorPeers = []map[string]string{
	{LabelApp: "hourglass-executor"},
	{"app.kubernetes.io/part-of": "hourglass", "component": "executor"},
}

// policies remembers, per namespace, that this process applied the
// namespace's policy as desired: a reconcile that runs before the cache
// shows it does not apply it again. A deletion seen by the watch clears
// it (forgetPolicy), so a policy someone deletes is made again.
type policies struct {
	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	applied map[string]bool
	// deleted counts the deletions the watch reported per namespace. The
	// watch's handler must not wait for a reconcile's lock, so a deletion
	// can land while ensurePolicy is between its read and its setApplied;
	// the count tells ensurePolicy its read is older than the deletion.
	deleted map[string]uint64
}

// lock serializes the work on ns's policy; mu guards the maps themselves,
// which every namespace shares.
func (p *policies) lock(ns string) func() {
	p.mu.Lock()
	p.init()
	l, ok := p.locks[ns]
	if !ok {
		l = &sync.Mutex{}
		p.locks[ns] = l
	}
	p.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// init makes the maps; the caller holds mu.
func (p *policies) init() {
	if p.locks == nil {
		p.locks, p.applied, p.deleted = map[string]*sync.Mutex{}, map[string]bool{}, map[string]uint64{}
	}
}

// deletions is how many deletions of ns's policy the watch has reported.
func (p *policies) deletions(ns string) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	return p.deleted[ns]
}

// markApplied records ns's policy as applied, unless the watch reported a
// deletion since seen (deletions): what the caller read or applied may be
// what was deleted, and the reconcile the deletion enqueued must apply it
// again.
func (p *policies) markApplied(ns string, seen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	if p.deleted[ns] == seen {
		p.applied[ns] = true
	}
}

// forget is the watch's report that ns's policy was deleted: it takes only
// mu, never ns's lock, so an informer's handler does not wait on a reconcile.
func (p *policies) forget(ns string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	delete(p.applied, ns)
	p.deleted[ns]++
}

func (p *policies) isApplied(ns string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	return p.applied[ns]
}

// clear forgets ns (its last Performer went); the caller holds ns's lock,
// so no ensurePolicy is between deletions and markApplied meanwhile.
func (p *policies) clear(ns string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	delete(p.applied, ns)
	delete(p.deleted, ns)
}

// isolate keeps the namespace's NetworkPolicy that lets only executor Pods
// of the namespace reach its performer Pods' gRPC port, and removes the
// per-Performer policy earlier versions made (performer-<name>, owned by
// the Performer). A failure here does not hold up the roll: the performer
// still serves, only unisolated.
func (r *Reconciler) isolate(ctx context.Context, s *scope) (skeleton.Result, error) {
	if err := r.dropLegacyPolicy(ctx, s.perf); err != nil {
		return skeleton.Continue(), err
	}
	conflict, err := r.ensurePolicy(ctx, s.perf.Namespace)
	if conflict != "" {
		s.serviceConflict = &specError{reason: ReasonObjectConflict, message: conflict}
	}
	return skeleton.Continue(), err
}

// ensurePolicy makes or corrects the namespace's policy. It returns what
// to tell the user when the name is someone else's.
func (r *Reconciler) ensurePolicy(ctx context.Context, ns string) (string, error) {
	want := desiredNetworkPolicy(ns)
	key := client.ObjectKeyFromObject(want)
	unlock := r.policies.lock(ns)
	defer unlock()
	seen := r.policies.deletions(ns)
	have := &networkingv1.NetworkPolicy{}
	err := r.Client.Get(ctx, key, have)
	if apierrors.IsNotFound(err) {
		if r.policies.isApplied(ns) {
			return "", nil // made here; the cache does not show it yet
		}
		// The cache holds only the operator's: create, which the API
		// server refuses if the name is taken, and read past the cache
		// only then, so someone else's is refused, not taken over (see
		// ensureService).
		err = serverside.Create(ctx, r.Client, FieldOwner, want)
		if err == nil {
			r.policies.markApplied(ns, seen)
			return "", nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating NetworkPolicy %s: %w", key, err)
		}
		err = r.APIReader.Get(ctx, key, have)
	}
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("NetworkPolicy %s went while being made", key)
	case err != nil:
		return "", fmt.Errorf("reading NetworkPolicy %s: %w", key, err)
	case have.Labels[meta.ManagedByLabel] != meta.ManagedByValue:
		return fmt.Sprintf("NetworkPolicy %s exists and is not managed by HyperFleet: delete or rename it so the operator can isolate the namespace's performers", have.Name), nil
	case apiequality.Semantic.DeepEqual(have.Spec, want.Spec) && labelsInclude(have.Labels, want.Labels):
		r.policies.markApplied(ns, seen)
		return "", nil
	}
	if err := serverside.Update(ctx, r.Client, r.APIReader, FieldOwner, want, have); err != nil {
		return "", fmt.Errorf("applying NetworkPolicy %s: %w", key, err)
	}
	r.policies.markApplied(ns, seen)
	return "", nil
}

// syncPolicy runs when a namespace's policy changed, or a Performer went:
// the policy is kept while the namespace has a Performer, and deleted with
// the last one (it has no owner the garbage collector could follow).
func (r *Reconciler) syncPolicy(ctx context.Context, ns string) error {
	var list hourglassv1alpha1.PerformerList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing the namespace's Performers: %w", err)
	}
	if len(list.Items) > 0 {
		_, err := r.ensurePolicy(ctx, ns)
		return err
	}
	unlock := r.policies.lock(ns)
	defer unlock()
	r.policies.clear(ns)
	have := &networkingv1.NetworkPolicy{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: NetworkPolicyName}, have); err != nil {
		return client.IgnoreNotFound(err)
	}
	if have.Labels[meta.ManagedByLabel] != meta.ManagedByValue {
		return nil
	}
	err := r.Client.Delete(ctx, have, client.Preconditions{UID: &have.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// forgetPolicy is the watch's news that a namespace's policy was deleted;
// the handler enqueues the namespace's Performers after it.
func (r *Reconciler) forgetPolicy(ns string) {
	r.policies.forget(ns)
}

// dropLegacyPolicy deletes the performer-<name> policy an earlier version
// made for this Performer alone: the namespace's policy replaces it.
func (r *Reconciler) dropLegacyPolicy(ctx context.Context, p *hourglassv1alpha1.Performer) error {
	old := &networkingv1.NetworkPolicy{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: ServiceName(p.Name)}, old); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(old, p) {
		return nil
	}
	if err := r.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the per-Performer NetworkPolicy %s: %w", old.Name, err)
	}
	return nil
}

func desiredNetworkPolicy(ns string) *networkingv1.NetworkPolicy {
	var from []networkingv1.NetworkPolicyPeer
	for _, peer := range executorPeers {
		from = append(from, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: maps.Clone(peer)}})
	}
	// The port by name: each Pod's own, so Performers on different ports,
	// and a port change's old revision, are all admitted on theirs.
	port := intstr.FromString(portName)
	tcp := corev1.ProtocolTCP
	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      NetworkPolicyName,
			Namespace: ns,
			Labels:    map[string]string{labelName: appName, meta.ManagedByLabel: meta.ManagedByValue},
		},
		Spec: networkingv1.NetworkPolicySpec{
			// Every performer Pod the operator made, of any Performer.
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelName: appName, meta.ManagedByLabel: meta.ManagedByValue}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  from,
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
}

func labelsInclude(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// policyEvents turns NetworkPolicy events into requests: the namespace's
// policy into a request of its own name (a Performer of that name, if
// any, is reconciled as usual; else the request syncs the policy), and an
// earlier version's per-Performer policy into its Performer's. A deleted
// namespace policy is forgotten first, so it is made again.
func (r *Reconciler) policyEvents() handler.EventHandler {
	toRequest := func(o client.Object) []reconcile.Request {
		if o.GetName() == NetworkPolicyName {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: NetworkPolicyName}}}
		}
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "Performer" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
		}
		return nil
	}
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object) {
		for _, req := range toRequest(o) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object.GetName() == NetworkPolicyName {
				r.forgetPolicy(e.Object.GetNamespace())
			}
			add(q, e.Object)
		},
	}
}
