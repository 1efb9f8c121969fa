package kubevirt

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Ownership is written as labels (selectable: List finds every machine this
// installation made with one query) plus an annotation for people. An object
// is this installation's when its owner UID matches and its installation
// label is this installation's or absent (made before installations, and
// then labelled when next seen: providers/installation.go).
const (
	// LabelManaged marks every object this provider made.
	LabelManaged = "hyperfleet.io/managed"
	// LabelOwnerUID holds the owning object's UID.
	LabelOwnerUID = "hyperfleet.io/owner-uid"
	// LabelOwnerKind holds the owning object's kind (MachineClaim, or the
	// kind of another owner a provider is made for), so a sweeper of one
	// kind's orphans never sees another kind's machines.
	LabelOwnerKind = "hyperfleet.io/owner-kind"
	// LabelInstallation holds the id of the installation that made it.
	LabelInstallation = "hyperfleet.io/installation"
	// AnnotationOwner holds "<namespace>/<name>" of the owner.
	AnnotationOwner = "hyperfleet.io/owner"
)

func (p *Provider) ownershipLabels(owner providers.Owner) map[string]string {
	return map[string]string{
		LabelManaged: "true", LabelOwnerUID: owner.UID, LabelOwnerKind: p.cfg.OwnerKind, LabelInstallation: p.cfg.Installation,
	}
}

// ownedBy reports whether obj carries owner's UID and this installation's
// label, or none.
func ownedBy(obj client.Object, owner providers.Owner, installation string) bool {
	labels := obj.GetLabels()
	if owner.UID == "" || labels[LabelOwnerUID] != owner.UID {
		return false
	}
	mark, marked := labels[LabelInstallation]
	return !marked || mark == installation
}

func (p *Provider) owns(obj client.Object, owner providers.Owner) bool {
	return ownedBy(obj, owner, p.cfg.Installation)
}

func ownerOf(obj client.Object) providers.Owner {
	o := providers.Owner{UID: obj.GetLabels()[LabelOwnerUID]}
	if ns, name, ok := strings.Cut(obj.GetAnnotations()[AnnotationOwner], "/"); ok {
		o.Namespace, o.Name = ns, name
	}
	return o
}

func merge(dst map[string]string, srcs ...map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	for _, src := range srcs {
		for k, v := range src {
			dst[k] = v
		}
	}
	return dst
}

// ownedVM reads ref's VirtualMachine through r: nil when it does not
// exist, an error wrapping ErrNotOwned when it is not owner's.
func (p *Provider) ownedVM(ctx context.Context, r client.Reader, ref providers.MachineRef, owner providers.Owner) (*kubevirtv1.VirtualMachine, error) {
	key := types.NamespacedName{Namespace: p.namespace(ref), Name: ref.Name}
	vm := &kubevirtv1.VirtualMachine{}
	if err := r.Get(ctx, key, vm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, apiError("reading VirtualMachine "+key.String(), err)
	}
	if !p.owns(vm, owner) {
		return nil, fmt.Errorf("VirtualMachine %s: %w", key, providers.ErrNotOwned)
	}
	return vm, nil
}
