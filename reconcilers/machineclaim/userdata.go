package machineclaim

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;delete

// deleteOwnedUserData deletes the claim's user-data Secret when the claim
// is its controller (a RunnerPool's bootstrap Secret, made for this one
// machine): the garbage collector would delete it too, but only where one
// runs and only after the claim is gone, and its registration token has no
// use once the machine is. A Secret someone else owns is never touched.
// Best effort: a failure is logged, never holds the claim.
func (r *Reconciler) deleteOwnedUserData(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) {
	ref := claim.Spec.UserDataSecretRef
	if ref == nil {
		return
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: ref.Name}, m); err != nil {
		if !apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Error(err, "Reading the claim's user-data Secret failed; it is left to the garbage collector", "secret", ref.Name)
		}
		return
	}
	if owner := metav1.GetControllerOf(m); owner == nil || owner.UID != claim.UID {
		return
	}
	uid := m.UID
	if err := r.Client.Delete(ctx, m, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		ctrl.LoggerFrom(ctx).Error(err, "Deleting the claim's user-data Secret failed; it is left to the garbage collector", "secret", ref.Name)
	}
}
