package proxmox

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Every VM HyperFleet makes carries these, and nothing else is ever touched:
//   - the tag "hyperfleet", the tag "hf-owner-<claim UID>" and the tag
//     "hf-inst-<installation id>" (set while configuring);
//   - the description lines "hyperfleet-owner-uid: <UID>" and
//     "hyperfleet-installation: <id>", passed to the clone call itself;
//     Proxmox writes them when the clone finishes (mid-clone the config is a
//     temporary one holding only "lock: clone").
//
// A VM is this installation's when its owner UID matches and its
// installation mark is this installation's, or absent: VMs made before
// installations carry none, and are marked when next seen by Create or by
// the sweeper (providers/installation.go).
const (
	managedTag            = "hyperfleet"
	ownerTagPrefix        = "hf-owner-"
	installationTagPrefix = "hf-inst-"
	installationLine      = "hyperfleet-installation: "
	// startedTag marks a VM HyperFleet has powered on once, so a VM found
	// stopped later is known to have shut itself down, and is never restarted.
	startedTag        = "hf-started"
	ownerDescription  = "hyperfleet-owner-uid: "
	ownerNameLine     = "hyperfleet-owner: "
	namePrefixForList = "hf-"
)

var (
	ownerLine        = regexp.MustCompile(`(?m)^hyperfleet-owner-uid: ([0-9a-fA-F-]+)\s*$`)
	installationMark = regexp.MustCompile(`(?m)^hyperfleet-installation: ([a-z0-9-]+)\s*$`)
)

func ownerTag(uid string) string { return ownerTagPrefix + strings.ToLower(uid) }

func installationTag(id string) string { return installationTagPrefix + id }

func description(o providers.Owner, installation string) string {
	return fmt.Sprintf("Managed by HyperFleet; deleting the MachineClaim deletes this VM.\n%s%s/%s\n%s%s\n%s%s\n",
		ownerNameLine, o.Namespace, o.Name, ownerDescription, o.UID, installationLine, installation)
}

// splitTags parses Proxmox's tag list (";" or "," or space separated).
func splitTags(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

func joinTags(tags []string) string {
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if t = strings.ToLower(strings.TrimSpace(t)); t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return strings.Join(out, ";")
}

// ownerUID reads the owner from tags, else from the description.
func ownerUID(tags []string, desc string) string {
	for _, t := range tags {
		if strings.HasPrefix(t, ownerTagPrefix) {
			return strings.TrimPrefix(t, ownerTagPrefix)
		}
	}
	if m := ownerLine.FindStringSubmatch(desc); m != nil {
		return strings.ToLower(m[1])
	}
	return ""
}

// installationOf reads the installation mark from tags, else from the
// description; "" for a VM made before installations.
func installationOf(tags []string, desc string) string {
	for _, t := range tags {
		if strings.HasPrefix(t, installationTagPrefix) {
			return strings.TrimPrefix(t, installationTagPrefix)
		}
	}
	if m := installationMark.FindStringSubmatch(desc); m != nil {
		return m[1]
	}
	return ""
}

// ownedBy reports whether the VM is owner's and this installation's (or
// unmarked, made before installations).
func ownedBy(tags []string, desc string, owner providers.Owner, installation string) bool {
	uid := ownerUID(tags, desc)
	if uid == "" || uid != strings.ToLower(owner.UID) {
		return false
	}
	mark := installationOf(tags, desc)
	return mark == "" || mark == installation
}

// foreign reports whether the VM is marked for another installation: never
// listed, never touched.
func foreign(tags []string, desc, installation string) bool {
	mark := installationOf(tags, desc)
	return mark != "" && mark != installation
}
