package kubevirt

import (
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Ownership is written as labels (selectable: List finds every machine this
// operator made with one query) plus an annotation for people.
const (
	// LabelManaged marks every object this provider made.
	LabelManaged = "hyperfleet.io/managed"
	// LabelOwnerUID holds the owning object's UID.
	LabelOwnerUID = "hyperfleet.io/owner-uid"
	// LabelOwnerKind holds the owning object's kind (MachineClaim,
	// Cyberdesk), so the MachineClaim orphan sweeper never sees a desktop.
	LabelOwnerKind = "hyperfleet.io/owner-kind"
	// AnnotationOwner holds "<namespace>/<name>" of the owner.
	AnnotationOwner = "hyperfleet.io/owner"
)

func ownershipLabels(kind string, owner providers.Owner) map[string]string {
	return map[string]string{LabelManaged: "true", LabelOwnerUID: owner.UID, LabelOwnerKind: kind}
}

// ownedBy reports whether obj carries owner's UID.
func ownedBy(obj client.Object, owner providers.Owner) bool {
	return obj.GetLabels()[LabelOwnerUID] == owner.UID && owner.UID != ""
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
