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

// AnnotationStartStrategy marks a VirtualMachine made halted until its
// cloud-init Secret exists; its value is the run strategy to start it with.
// It lives on the VM, not in memory, so a provider that crashed between the
// steps finishes the start on its next Create.
const AnnotationStartStrategy = "hyperfleet.io/start-strategy"

// holdForUserData makes vm wait halted for its Secret, remembering the run
// strategy it is meant to start with.
func holdForUserData(vm *kubevirtv1.VirtualMachine) {
	vm.Annotations = merge(vm.Annotations, map[string]string{AnnotationStartStrategy: string(runStrategy(vm))})
	halted := kubevirtv1.RunStrategyHalted
	vm.Spec.RunStrategy, vm.Spec.Running = &halted, nil
}

// heldForUserData reports whether vm still waits for its Secret.
func heldForUserData(vm *kubevirtv1.VirtualMachine) bool {
	_, held := vm.Annotations[AnnotationStartStrategy]
	return held
}

// provideUserData creates the cloud-init Secret owned by vm (or brings the
// one there up to date), then starts vm. vm must carry its UID. Every step
// is idempotent, so a retry after any failure finishes the job.
func (p *Provider) provideUserData(ctx context.Context, vm *kubevirtv1.VirtualMachine, s *corev1.Secret, owner providers.Owner) error {
	s.OwnerReferences = []metav1.OwnerReference{vmOwnerRef(vm)}
	if err := p.ensureSecret(ctx, s, owner); err != nil {
		return err
	}
	return p.startHeld(ctx, vm)
}

// vmOwnerRef makes the VM the owner of what it mounts, so Kubernetes'
// garbage collector removes it with the VM even when someone deletes the
// VM by hand.
func vmOwnerRef(vm *kubevirtv1.VirtualMachine) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID,
	}
}

// ensureSecret creates s, or updates the one of the same name if it is
// ours: its user data and its owner.
func (p *Provider) ensureSecret(ctx context.Context, s *corev1.Secret, owner providers.Owner) error {
	err := p.cfg.Client.Create(providers.WithoutBodies(ctx), s)
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return apiError("creating Secret "+s.Namespace+"/"+s.Name, err)
		}
		return nil
	}
	have := &corev1.Secret{}
	if err := p.cfg.Reader.Get(ctx, client.ObjectKeyFromObject(s), have); err != nil {
		return apiError("reading Secret "+s.Namespace+"/"+s.Name, err)
	}
	if !p.owns(have, owner) {
		return providers.Permanent("SecretNameTaken", fmt.Sprintf(
			"Secret %s/%s, where the machine's cloud-init user data goes, exists and was not made for %s/%s; delete or rename it",
			s.Namespace, s.Name, owner.Namespace, owner.Name), nil)
	}
	if string(have.Data[UserDataKey]) == string(s.Data[UserDataKey]) && sameOwners(have.OwnerReferences, s.OwnerReferences) {
		return nil
	}
	// A patch with the read's resourceVersion: the same optimistic lock as an
	// update, without the operator needing the broader update right on
	// every Secret of the cluster.
	patch := client.MergeFromWithOptions(have.DeepCopy(), client.MergeFromWithOptimisticLock{})
	have.Data, have.OwnerReferences = s.Data, s.OwnerReferences
	return apiError("updating Secret "+s.Namespace+"/"+s.Name, p.cfg.Client.Patch(ctx, have, patch))
}

func sameOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID {
			return false
		}
	}
	return true
}

// startHeld gives a held VM the run strategy it was made for and drops the
// mark, in one patch; vm is updated from the answer.
func (p *Provider) startHeld(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	want, held := vm.Annotations[AnnotationStartStrategy]
	if !held {
		return nil
	}
	patch := map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{AnnotationStartStrategy: nil}},
		"spec":     map[string]any{"runStrategy": want, "running": nil},
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := p.cfg.Client.Patch(ctx, vm, client.RawPatch(types.MergePatchType, raw)); err != nil {
		return apiError("starting VirtualMachine "+vm.Namespace+"/"+vm.Name, err)
	}
	return nil
}
