package kubevirt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers"
)

// KindCloudInitSecret is the Leftover kind of a cloud-init Secret.
const KindCloudInitSecret = "cloudinit-secret"

var (
	_ providers.InstallationMarker = (*Provider)(nil)
	_ providers.LeftoverCleaner    = (*Provider)(nil)
)

// MarkInstallation labels a VirtualMachine made before installations, and
// its cloud-init Secret, with this installation, once the caller knows its
// owner is one of this installation's (the sweeper, Create).
func (p *Provider) MarkInstallation(ctx context.Context, ref providers.MachineRef, owner providers.Owner) error {
	key := types.NamespacedName{Namespace: p.namespace(ref), Name: ref.Name}
	vm := &kubevirtv1.VirtualMachine{}
	if err := p.cfg.Reader.Get(ctx, key, vm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return apiError("reading VirtualMachine "+key.String(), err)
	}
	if !p.owns(vm, owner) {
		return fmt.Errorf("VirtualMachine %s: %w", key, providers.ErrNotOwned)
	}
	return p.mark(ctx, vm)
}

// mark adds the installation label to an owned VirtualMachine that lacks
// it, then to its cloud-init Secret when that carries the same owner.
func (p *Provider) mark(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	if vm.Labels[LabelInstallation] == p.cfg.Installation {
		return nil
	}
	if err := p.label(ctx, vm, vm.ResourceVersion); err != nil {
		return apiError("labelling VirtualMachine "+vm.Namespace+"/"+vm.Name+" with its installation", err)
	}
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(secretGVK)
	err := p.cfg.Reader.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: secretName(vm.Name)}, s)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return apiError("reading Secret "+vm.Namespace+"/"+secretName(vm.Name), err)
	case s.Labels[LabelOwnerUID] != vm.Labels[LabelOwnerUID] || s.Labels[LabelInstallation] != "":
		return nil // not made with this VM, or marked already
	}
	return apiError("labelling Secret "+s.Namespace+"/"+s.Name+" with its installation", p.label(ctx, s, s.ResourceVersion))
}

// label merge-patches the installation label onto obj; the resourceVersion
// precondition makes a stale read fail instead of racing another writer.
func (p *Provider) label(ctx context.Context, obj client.Object, resourceVersion string) error {
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion, "labels": map[string]string{LabelInstallation: p.cfg.Installation},
	}})
	if err != nil {
		return err
	}
	return p.cfg.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw))
}

// Leftovers lists this installation's cloud-init Secrets whose
// VirtualMachine does not exist. Only the Secrets' metadata is read, never
// their data, and uncached: the operator keeps no Secret in memory.
func (p *Provider) Leftovers(ctx context.Context) ([]providers.Leftover, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(secretGVK.GroupVersion().WithKind("SecretList"))
	opts := []client.ListOption{client.MatchingLabels{
		LabelManaged: "true", LabelOwnerKind: p.cfg.OwnerKind, LabelInstallation: p.cfg.Installation,
	}}
	if p.cfg.Namespace != "" {
		opts = append(opts, client.InNamespace(p.cfg.Namespace))
	}
	if err := p.cfg.Reader.List(ctx, list, opts...); err != nil {
		return nil, apiError("listing cloud-init Secrets", err)
	}
	var out []providers.Leftover
	for _, s := range list.Items {
		vm, ok := strings.CutSuffix(s.Name, secretName(""))
		if !ok {
			continue
		}
		gone, err := p.vmGone(ctx, s.Namespace, vm)
		if err != nil {
			return nil, err
		}
		if gone {
			out = append(out, providers.Leftover{
				ID: s.Namespace + "/" + s.Name, Kind: KindCloudInitSecret, Installation: p.cfg.Installation,
				Machine: providers.MachineRef{Namespace: s.Namespace, Name: vm},
			})
		}
	}
	return out, nil
}

// DeleteLeftover deletes a cloud-init Secret of this installation whose
// VirtualMachine is still absent.
func (p *Provider) DeleteLeftover(ctx context.Context, l providers.Leftover) error {
	ns, name, _ := strings.Cut(l.ID, "/")
	vm, ok := strings.CutSuffix(name, secretName(""))
	if l.Kind != KindCloudInitSecret || !ok {
		return fmt.Errorf("%s is not a cloud-init Secret: %w", l.ID, providers.ErrNotOwned)
	}
	if gone, err := p.vmGone(ctx, ns, vm); err != nil || !gone {
		return err // made again: the Secret is in use
	}
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(secretGVK)
	if err := p.cfg.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return apiError("reading Secret "+l.ID, err)
	}
	if s.Labels[LabelManaged] != "true" || s.Labels[LabelOwnerKind] != p.cfg.OwnerKind || s.Labels[LabelInstallation] != p.cfg.Installation {
		return fmt.Errorf("Secret %s: %w", l.ID, providers.ErrNotOwned)
	}
	err := p.cfg.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return apiError("deleting Secret "+l.ID, err)
	}
	return nil
}

// vmGone asks the API server, not a cache, whether the VirtualMachine is
// absent: a cache a moment behind would call a fresh VM's Secret a leftover.
func (p *Provider) vmGone(ctx context.Context, ns, name string) (bool, error) {
	vm := &metav1.PartialObjectMetadata{}
	vm.SetGroupVersionKind(kubevirtv1.SchemeGroupVersion.WithKind("VirtualMachine"))
	err := p.cfg.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, vm)
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err):
		return true, nil
	}
	return false, apiError("reading VirtualMachine "+ns+"/"+name, err)
}
