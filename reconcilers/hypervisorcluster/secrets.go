package hypervisorcluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// SecretFinalizer is put on the credentials and CA Secrets a cluster
// references, so a GitOps prune that deletes the Secret before the cluster
// leaves it readable until the cluster's machines are deleted. One finalizer
// serves every cluster of the namespace that references the Secret; the last
// one to let go removes it.
const SecretFinalizer = "hypervisor.hyperfleet.io/credentials-in-use"

// HeldSecretsAnnotation lists, on a cluster, the Secrets it put
// SecretFinalizer on. It is written before the finalizer is added, so a
// changed reference (or a restart in between) never forgets a Secret it
// holds: the state lives in the API server, not in this process.
const HeldSecretsAnnotation = "hypervisor.hyperfleet.io/held-secrets"

// referencedSecrets are the Secrets the cluster's provider is built from.
func referencedSecrets(c *hypervisorv1alpha1.HypervisorCluster) []string {
	var names []string
	if ref := c.Spec.CredentialsRef; ref != nil {
		names = append(names, ref.Name)
	}
	if c.Spec.TLS != nil && c.Spec.TLS.CABundleRef != nil && c.Spec.TLS.CABundleRef.Kind != meta.ConfigMapKind {
		names = append(names, c.Spec.TLS.CABundleRef.Name)
	}
	return normalize(names)
}

func heldSecrets(c *hypervisorv1alpha1.HypervisorCluster) []string {
	v := c.GetAnnotations()[HeldSecretsAnnotation]
	if v == "" {
		return nil
	}
	return normalize(strings.Split(v, ","))
}

func normalize(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// holdSecrets keeps the cluster's Secrets readable for as long as the
// cluster may need them: it records them on the cluster, puts
// SecretFinalizer on each, and lets go of the ones the spec no longer
// names. It notes the referenced Secrets that are being deleted, for the
// status.
func (r *Reconciler) holdSecrets(ctx context.Context, s *scope) error {
	c := s.cluster
	want, held := referencedSecrets(c), heldSecrets(c)
	if all := normalize(append(slices.Clone(held), want...)); !slices.Equal(all, held) {
		if err := r.recordHeld(ctx, s, all); err != nil {
			return err
		}
	}
	for _, name := range want {
		deleting, err := r.holdSecret(ctx, c.Namespace, name)
		if err != nil {
			return err
		}
		if deleting {
			s.secretsDeleting = append(s.secretsDeleting, name)
		}
	}
	var dropped []string
	for _, name := range held {
		if !slices.Contains(want, name) {
			dropped = append(dropped, name)
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	if err := r.releaseSecrets(ctx, c, dropped); err != nil {
		return err
	}
	return r.recordHeld(ctx, s, want)
}

// recordHeld writes the held Secrets' names on the cluster (a merge patch,
// so no conflict with the status write) and rebases the status patch.
func (r *Reconciler) recordHeld(ctx context.Context, s *scope, names []string) error {
	c := s.cluster
	patch := client.MergeFrom(c.DeepCopy())
	if len(names) == 0 {
		delete(c.Annotations, HeldSecretsAnnotation)
	} else {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[HeldSecretsAnnotation] = strings.Join(names, ",")
	}
	if err := r.Client.Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("recording the Secrets HypervisorCluster %s holds: %w", c.Name, err)
	}
	s.patch.Rebase()
	return nil
}

// holdSecret puts SecretFinalizer on one Secret, reading and writing only
// its metadata (its data never leaves the API server here). A Secret that
// is missing, or lacks the credentials label (HyperFleet does not touch
// it), is left alone: the provider reports either. It reports whether the
// Secret is being deleted.
func (r *Reconciler) holdSecret(ctx context.Context, namespace, name string) (bool, error) {
	m, err := r.secretMetadata(ctx, namespace, name)
	if err != nil || m == nil {
		return false, err
	}
	if _, ok := m.Labels[meta.CredentialsLabel]; !ok {
		return false, nil
	}
	deleting := !m.DeletionTimestamp.IsZero()
	if controllerutil.ContainsFinalizer(m, SecretFinalizer) || deleting {
		// A Secret being deleted takes no new finalizer: the API server
		// refuses one, and its holder, if any, is already there.
		return deleting, nil
	}
	patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(m, SecretFinalizer)
	if err := r.Client.Patch(ctx, m, patch); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("keeping Secret %s/%s readable for the cluster's cleanup: %w", namespace, name, err)
	}
	return false, nil
}

// releaseSecrets removes SecretFinalizer from each Secret that no other
// cluster of the namespace still needs. The other clusters are read from
// the API server, not the cache: a cluster released a moment ago must not
// be seen holding the Secret, or its finalizer would be left for ever.
func (r *Reconciler) releaseSecrets(ctx context.Context, c *hypervisorv1alpha1.HypervisorCluster, names []string) error {
	var list hypervisorv1alpha1.HypervisorClusterList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
		return fmt.Errorf("listing the HypervisorClusters that may share a Secret: %w", err)
	}
	for _, name := range names {
		if sharedWith(list.Items, c, name) {
			continue
		}
		if err := r.releaseSecret(ctx, c.Namespace, name); err != nil {
			return err
		}
	}
	return nil
}

// sharedWith reports whether a cluster other than c, not yet released,
// references or holds the Secret name.
func sharedWith(clusters []hypervisorv1alpha1.HypervisorCluster, c *hypervisorv1alpha1.HypervisorCluster, name string) bool {
	for i := range clusters {
		o := &clusters[i]
		if o.UID == c.UID || (!o.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(o, Finalizer)) {
			continue
		}
		if slices.Contains(referencedSecrets(o), name) || slices.Contains(heldSecrets(o), name) {
			return true
		}
	}
	return false
}

func (r *Reconciler) releaseSecret(ctx context.Context, namespace, name string) error {
	m, err := r.secretMetadata(ctx, namespace, name)
	if err != nil || m == nil || !controllerutil.ContainsFinalizer(m, SecretFinalizer) {
		return err
	}
	patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(m, SecretFinalizer)
	if err := r.Client.Patch(ctx, m, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing Secret %s/%s: %w", namespace, name, err)
	}
	return nil
}

// secretMetadata reads a Secret's metadata past the cache (which holds only
// the operator's namespace); nil when it does not exist.
func (r *Reconciler) secretMetadata(ctx context.Context, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
	}
	return m, nil
}
