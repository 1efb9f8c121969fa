package kubevirt

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers"
)

// PowerOff halts the VirtualMachine: runStrategy Halted, which KubeVirt
// answers with a graceful shutdown of the instance. (The stop subresource
// is served by virt-api; a runStrategy patch works with the plain API.)
func (p *Provider) PowerOff(ctx context.Context, ref providers.MachineRef, owner providers.Owner) error {
	vm, err := p.ownedVM(ctx, p.cfg.Client, ref, owner)
	if err != nil || vm == nil {
		return err
	}
	key := client.ObjectKeyFromObject(vm)
	if runStrategy(vm) == kubevirtv1.RunStrategyHalted && vm.Spec.Running == nil {
		return nil
	}
	// The resourceVersion precondition makes a stale read fail instead of
	// overwriting a concurrent change; the caller retries.
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": vm.ResourceVersion},
		"spec":     map[string]any{"runStrategy": string(kubevirtv1.RunStrategyHalted), "running": nil},
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := p.cfg.Client.Patch(ctx, vm, client.RawPatch(types.MergePatchType, raw)); err != nil && !apierrors.IsNotFound(err) {
		return apiError("halting VirtualMachine "+key.String(), err)
	}
	return nil
}

// Delete removes the VirtualMachine and its cloud-init Secret, and answers
// ErrInProgress until the VM and its instance are gone.
func (p *Provider) Delete(ctx context.Context, ref providers.MachineRef, owner providers.Owner) error {
	ns := p.namespace(ref)
	key := types.NamespacedName{Namespace: ns, Name: ref.Name}
	vm := &kubevirtv1.VirtualMachine{}
	err := p.cfg.Reader.Get(ctx, key, vm)
	switch {
	case err == nil:
		if !p.owns(vm, owner) {
			return fmt.Errorf("VirtualMachine %s: %w", key, providers.ErrNotOwned)
		}
		if vm.DeletionTimestamp == nil {
			// Background propagation: a foreground delete would wait on a
			// garbage collector some clusters (and test control planes) lack.
			err := p.cfg.Client.Delete(ctx, vm, client.Preconditions{UID: &vm.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err != nil && !apierrors.IsNotFound(err) {
				return apiError("deleting VirtualMachine "+key.String(), err)
			}
		}
		// The guest read its user data at boot: the Secret goes now, so a
		// caller that stops calling (a released claim, a sweeper that sees
		// the VM gone) never leaves it behind.
		if err := p.deleteSecret(ctx, ns, ref.Name, owner); err != nil {
			return err
		}
		return fmt.Errorf("VirtualMachine %s is being deleted: %w", key, providers.ErrInProgress)
	case !apierrors.IsNotFound(err):
		return apiError("reading VirtualMachine "+key.String(), err)
	}
	if err := p.deleteSecret(ctx, ns, ref.Name, owner); err != nil {
		return err
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := p.cfg.Reader.Get(ctx, key, vmi); err == nil {
		if p.owns(vmi, owner) {
			return fmt.Errorf("VirtualMachineInstance %s is shutting down: %w", key, providers.ErrInProgress)
		}
	} else if !apierrors.IsNotFound(err) {
		return apiError("reading VirtualMachineInstance "+key.String(), err)
	}
	return nil
}

func (p *Provider) deleteSecret(ctx context.Context, ns, vm string, owner providers.Owner) error {
	key := types.NamespacedName{Namespace: ns, Name: secretName(vm)}
	s := &corev1.Secret{}
	if err := p.cfg.Reader.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return apiError("reading Secret "+key.String(), err)
	}
	if !p.owns(s, owner) {
		return nil // not ours: never delete what we did not make
	}
	if err := p.cfg.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
		return apiError("deleting Secret "+key.String(), err)
	}
	return nil
}
