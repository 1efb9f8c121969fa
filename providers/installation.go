package providers

import (
	"context"
	"fmt"
	"regexp"
)

// An installation is one running HyperFleet (its own operator, its own
// claims): dev, staging and prod may share one Proxmox or KubeVirt. Every
// machine carries its installation's id beside its owner's UID, and a
// provider built for one installation lists, powers off and deletes only
// that installation's machines — so one installation's sweeper never takes
// another's machines for orphans.
//
// Machines made before installations existed carry no installation mark.
// They are ours when their owner's UID is a claim we know (UIDs are unique),
// and are then marked (InstallationMarker); the sweeper never deletes an
// unmarked machine, since it cannot tell which installation made it.

// installationID: it becomes a Proxmox tag and a Kubernetes label value, so
// lowercase letters, digits and '-', starting and ending with a letter or
// digit, at most 63 characters (a namespace UID is 36).
var installationID = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateInstallation checks an installation id, saying what is wrong.
func ValidateInstallation(id string) error {
	if !installationID.MatchString(id) {
		return fmt.Errorf("installation id %q must be 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit (it becomes a Proxmox tag and a Kubernetes label value)", id)
	}
	return nil
}

// InstallationMarker is implemented by providers whose machines carry an
// installation mark. The sweeper calls it for an unmarked machine (made
// before installations) whose owner is a claim of this installation.
type InstallationMarker interface {
	// MarkInstallation marks ref with this provider's installation when it
	// is owned by owner and carries no installation mark yet. A machine
	// marked for another installation, or not owned by owner, is refused
	// with ErrNotOwned; an absent one is left alone.
	MarkInstallation(ctx context.Context, ref MachineRef, owner Owner) error
}

// Leftover is something a provider made for a machine besides the machine
// (a Proxmox cloud-init ISO, a KubeVirt cloud-init Secret) whose machine no
// longer exists: deleting the machine normally removes it, but a crash or a
// machine deleted by other hands can leave it behind.
type Leftover struct {
	// ID names it on the hypervisor ("local:iso/hf-….iso", "ns/name");
	// stable, so the sweeper can time its grace.
	ID string
	// Kind says what it is, in a metric label: "cloudinit-iso",
	// "cloudinit-secret".
	Kind string
	// Machine is the machine it was made for, now gone.
	Machine MachineRef
	// Installation is the installation whose name or mark it carries; ""
	// for one made before installations, which is reported, never deleted.
	Installation string
}

// LeftoverCleaner is implemented by providers that make things beside
// their machines. Both calls concern only this provider's installation.
type LeftoverCleaner interface {
	// Leftovers lists what this installation made for machines that no
	// longer exist, plus, with Installation "", such things made before
	// installations.
	Leftovers(ctx context.Context) ([]Leftover, error)
	// DeleteLeftover removes one, if it is still a leftover of this
	// installation; removing an absent one succeeds.
	DeleteLeftover(ctx context.Context, l Leftover) error
}

// OwnerChanger is implemented by providers that can hand a machine, and
// what they made beside it, from one owner to another: how a machine made
// for an owner of one kind is taken over by the owner that replaces it (a
// Cyberdesk's VM, made before desks had claims, by the desk's claim).
type OwnerChanger interface {
	// ChangeOwner makes to the owner of ref if from owns it now. A machine
	// to owns already is left as it is; one owned by neither is refused
	// with ErrNotOwned; an absent one with ErrNotFound.
	ChangeOwner(ctx context.Context, ref MachineRef, from, to Owner) error
}
