package kubevirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers"
)

var _ providers.OwnerChanger = (*Provider)(nil)

// ChangeOwner relabels a VirtualMachine of from's, and its cloud-init
// Secret, as to's. The Secret goes first: a crash in between leaves a VM
// still from's beside a Secret already to's, and the next call finishes the
// VM; the other order would leave to's VM with a Secret its Delete skips.
func (p *Provider) ChangeOwner(ctx context.Context, ref providers.MachineRef, from, to providers.Owner) error {
	vm, err := p.ownedVM(ctx, p.cfg.Reader, ref, to)
	switch {
	case err == nil && vm != nil:
		return nil // changed already
	case err == nil:
		return fmt.Errorf("VirtualMachine %s/%s: %w", p.namespace(ref), ref.Name, providers.ErrNotFound)
	case !errors.Is(err, providers.ErrNotOwned):
		return err
	}
	if vm, err = p.ownedVM(ctx, p.cfg.Reader, ref, from); err != nil {
		return err
	}
	if vm == nil {
		return fmt.Errorf("VirtualMachine %s/%s: %w", p.namespace(ref), ref.Name, providers.ErrNotFound)
	}
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(secretGVK)
	err = p.cfg.Reader.Get(ctx, types.NamespacedName{Namespace: vm.Namespace, Name: secretName(vm.Name)}, s)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return apiError("reading Secret "+vm.Namespace+"/"+secretName(vm.Name), err)
	case p.owns(s, from):
		if err := p.relabel(ctx, s, to); err != nil {
			return apiError("handing Secret "+s.Namespace+"/"+s.Name+" to its new owner", err)
		}
	}
	return apiError("handing VirtualMachine "+vm.Namespace+"/"+vm.Name+" to its new owner", p.relabel(ctx, vm, to))
}

// relabel merge-patches obj's owner labels and annotation to owner's; the
// resourceVersion precondition makes a stale read fail instead of racing.
func (p *Provider) relabel(ctx context.Context, obj client.Object, owner providers.Owner) error {
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": obj.GetResourceVersion(),
		"labels":          p.ownershipLabels(owner),
		"annotations":     map[string]string{AnnotationOwner: owner.Namespace + "/" + owner.Name},
	}})
	if err != nil {
		return err
	}
	return p.cfg.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw))
}
