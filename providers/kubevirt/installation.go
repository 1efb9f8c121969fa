package kubevirt

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers"
)

// A cloud-init Secret is never left without its VirtualMachine for long:
// the VM owns it (adoptSecret), so Kubernetes' garbage collector removes it
// with the VM, and Delete removes it explicitly. So this provider lists no
// leftovers: finding a Secret without a VM would need a cluster-wide list
// of Secrets, which the operator is never granted.

var _ providers.InstallationMarker = (*Provider)(nil)

// MarkInstallation labels a VirtualMachine made before installations, and
// its cloud-init Secret, with this installation, once the caller knows its
// owner is one of this installation's (the sweeper, Create).
func (p *Provider) MarkInstallation(ctx context.Context, ref providers.MachineRef, owner providers.Owner) error {
	vm, err := p.ownedVM(ctx, p.cfg.Reader, ref, owner)
	if err != nil || vm == nil {
		return err
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
