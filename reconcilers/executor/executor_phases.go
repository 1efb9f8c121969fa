package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/serverside"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// conflictError: an object of ours by name exists but belongs to someone else.
type conflictError struct{ message string }

func (e *conflictError) Error() string { return e.message }

// validateSpec refuses a spec no retry can fix: the executor is Stalled
// until it is edited, and that edit triggers a reconcile by itself.
func (r *Reconciler) validateSpec(_ context.Context, s *scope) (skeleton.Result, error) {
	if err := validate(s.exec); err != nil {
		return skeleton.Stop(), skeleton.Stalled(meta.InvalidSpecReason, err.Error())
	}
	return skeleton.Continue(), nil
}

// renderConfig renders the configuration from the selected performers.
func (r *Reconciler) renderConfig(ctx context.Context, s *scope) (skeleton.Result, error) {
	e := s.exec
	performers, err := r.selectedPerformers(ctx, e)
	if err != nil {
		var se *selectorError
		if errors.As(err, &se) {
			return skeleton.Stop(), skeleton.Stalled(meta.InvalidSpecReason, se.Error())
		}
		return skeleton.Stop(), err
	}
	config, err := renderConfig(e, performers, r.ClusterDomain)
	if err != nil {
		return skeleton.Stop(), err
	}
	s.config, s.configHash = config, configHash(config)
	return skeleton.Continue(), nil
}

// applyConfigMap applies the configuration's ConfigMap.
func (r *Reconciler) applyConfigMap(ctx context.Context, s *scope) (skeleton.Result, error) {
	if err := r.ensureOwned(ctx, s.exec, desiredConfigMap(s.exec, s.config), &corev1.ConfigMap{}); err != nil {
		return skeleton.Stop(), ownedError(err, "applying ConfigMap "+ConfigMapName(s.exec))
	}
	return skeleton.Continue(), nil
}

// applyDeployment applies the Deployment, whose Pod template carries the
// configuration's hash so a new configuration rolls it.
func (r *Reconciler) applyDeployment(ctx context.Context, s *scope) (skeleton.Result, error) {
	dep := desiredDeployment(s.exec, s.configHash)
	if err := r.ensureOwned(ctx, s.exec, dep, &appsv1.Deployment{}); err != nil {
		return skeleton.Stop(), ownedError(err, "applying Deployment "+DeploymentName(s.exec))
	}
	s.deployment = dep
	return skeleton.Continue(), nil
}

// ownedError makes a name taken by someone else's object Stalled: only a
// person can delete or rename it, and its deletion triggers no reconcile.
func ownedError(err error, doing string) error {
	var conflict *conflictError
	if errors.As(err, &conflict) {
		return skeleton.Stalled(ReasonConflict, conflict.message)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// findKeysSecret looks for the keys Secret, and looks again on a schedule
// while it is missing: the operator watches no Secrets there.
func (r *Reconciler) findKeysSecret(ctx context.Context, s *scope) (skeleton.Result, error) {
	found, err := r.keysSecretExists(ctx, s.exec)
	if err != nil {
		return skeleton.Stop(), err
	}
	s.keysFound = &found
	if !found {
		return skeleton.Requeue(r.secretRetry(s.exec)), nil
	}
	return skeleton.Continue(), nil
}

type selectorError struct{ err error }

func (e *selectorError) Error() string { return "spec.performerSelector: " + e.err.Error() }

// selectedPerformers are the Performers of the executor's namespace its
// selector picks (all of them when it has none), from the cache.
func (r *Reconciler) selectedPerformers(ctx context.Context, e *hourglassv1alpha1.HourglassExecutor) ([]hourglassv1alpha1.Performer, error) {
	sel := labels.Everything()
	if e.Spec.PerformerSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(e.Spec.PerformerSelector); err != nil {
			return nil, &selectorError{err: err}
		}
	}
	var list hourglassv1alpha1.PerformerList
	if err := r.Client.List(ctx, &list, client.InNamespace(e.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing Performers: %w", err)
	}
	out := list.Items[:0]
	for _, p := range list.Items {
		// A Performer on its way out is not offered to the executor.
		if p.DeletionTimestamp.IsZero() {
			out = append(out, p)
		}
	}
	return out, nil
}

// ensureOwned applies want, owned by e, unless an object of that name
// exists that e does not control. The applied result is left in want.
//
// The cache holds only objects labelled as the operator's: someone else's
// object of this name, or one the original Hourglass operator made, is
// invisible to it. When the cache shows none, want is created, not
// applied: the API server refuses a create whose name is taken, changing
// nothing, so a new executor costs no read, and an apply, which would take
// over whatever has the name, never meets an object that is not ours.
// Only when the create conflicts is the object read past the cache:
// someone else's is refused, the original operator's adopted (the apply
// adds the label), and one of ours the cache does not show yet brought up
// to date.
func (r *Reconciler) ensureOwned(ctx context.Context, e *hourglassv1alpha1.HourglassExecutor, want, existing client.Object) error {
	if err := controllerutil.SetControllerReference(e, want, r.Scheme); err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(want)
	err := r.Client.Get(ctx, key, existing)
	if apierrors.IsNotFound(err) {
		err = serverside.Create(ctx, r.Client, fieldOwner, want)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		err = r.APIReader.Get(ctx, key, existing)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %s went while being made", want.GetObjectKind().GroupVersionKind().Kind, want.GetName())
		}
	}
	switch {
	case err != nil:
		return err
	case !metav1.IsControlledBy(existing, e):
		return &conflictError{message: fmt.Sprintf("%s %s exists and is not managed by this HourglassExecutor: delete or rename it so the operator can make its own",
			want.GetObjectKind().GroupVersionKind().Kind, want.GetName())}
	}
	return serverside.Update(ctx, r.Client, r.APIReader, fieldOwner, want, existing)
}

// secretRetry waits a quarter of the time the executor has been waiting for
// its Secret (since Ready turned False), between 2 s and
// SecretRetryInterval: quick while an ExternalSecret is likely about to
// sync, unhurried once the Secret is clearly not coming by itself.
func (r *Reconciler) secretRetry(e *hourglassv1alpha1.HourglassExecutor) time.Duration {
	var missing time.Duration
	if c := apimeta.FindStatusCondition(e.Status.Conditions, meta.ReadyCondition); c != nil && c.Reason == meta.SecretNotFoundReason {
		missing = time.Since(c.LastTransitionTime.Time)
	}
	return min(max(missing/4, 2*time.Second), r.SecretRetryInterval)
}

// keysSecretExists reads the Secret's metadata only, through the API
// server: the operator never holds the keys, not even in its cache.
func (r *Reconciler) keysSecretExists(ctx context.Context, e *hourglassv1alpha1.HourglassExecutor) (bool, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: e.Spec.OperatorKeys.SecretRef.Name}, m)
	switch {
	case err == nil:
		return m.DeletionTimestamp.IsZero(), nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("looking for the keys Secret %s: %w", e.Spec.OperatorKeys.SecretRef.Name, err)
	}
}
