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
)

// conflictError: an object of ours by name exists but belongs to someone else.
type conflictError struct{ message string }

func (e *conflictError) Error() string { return e.message }

// reconcileExecutor renders the configuration, applies the ConfigMap and the
// Deployment, and looks for the keys Secret.
func (r *Reconciler) reconcileExecutor(ctx context.Context, s *scope) error {
	e := s.exec
	if err := validate(e); err != nil {
		s.outcome = stalled(meta.InvalidSpecReason, err.Error())
		return nil
	}
	performers, err := r.selectedPerformers(ctx, e)
	if err != nil {
		var se *selectorError
		if errors.As(err, &se) {
			s.outcome = stalled(meta.InvalidSpecReason, se.Error())
			return nil
		}
		return err
	}
	config, err := renderConfig(e, performers, r.ClusterDomain)
	if err != nil {
		return err
	}
	s.configHash = configHash(config)

	var conflict *conflictError
	if err := r.ensureOwned(ctx, e, desiredConfigMap(e, config), &corev1.ConfigMap{}); err != nil {
		if errors.As(err, &conflict) {
			s.outcome = stalled(ReasonConflict, conflict.message)
			return nil
		}
		return fmt.Errorf("applying ConfigMap %s: %w", ConfigMapName(e), err)
	}
	dep := desiredDeployment(e, s.configHash)
	if err := r.ensureOwned(ctx, e, dep, &appsv1.Deployment{}); err != nil {
		if errors.As(err, &conflict) {
			s.outcome = stalled(ReasonConflict, conflict.message)
			return nil
		}
		return fmt.Errorf("applying Deployment %s: %w", DeploymentName(e), err)
	}
	s.deployment = dep

	found, err := r.keysSecretExists(ctx, e)
	if err != nil {
		return err
	}
	s.keysFound = &found
	if !found {
		s.requeue = r.secretRetry(e)
	}
	s.outcome = evaluate(s)
	return nil
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
func (r *Reconciler) ensureOwned(ctx context.Context, e *hourglassv1alpha1.HourglassExecutor, want, existing client.Object) error {
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), existing)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case !metav1.IsControlledBy(existing, e):
		return &conflictError{message: fmt.Sprintf("%s %s exists and is not managed by this HourglassExecutor: delete or rename it so the operator can make its own",
			want.GetObjectKind().GroupVersionKind().Kind, want.GetName())}
	}
	if err := controllerutil.SetControllerReference(e, want, r.Scheme); err != nil {
		return err
	}
	return serverside.Apply(ctx, r.Client, fieldOwner, want)
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
