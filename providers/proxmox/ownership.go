package proxmox

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Every VM HyperFleet makes carries these, and nothing else is ever touched:
//   - the tag "hyperfleet" and the tag "hf-owner-<claim UID>" (set while configuring);
//   - a description line "hyperfleet-owner-uid: <UID>", passed to the clone
//     call itself; Proxmox writes it when the clone finishes (mid-clone the
//     config is a temporary one holding only "lock: clone").
const (
	managedTag     = "hyperfleet"
	ownerTagPrefix = "hf-owner-"
	// startedTag marks a VM HyperFleet has powered on once, so a VM found
	// stopped later is known to have shut itself down, and is never restarted.
	startedTag        = "hf-started"
	ownerDescription  = "hyperfleet-owner-uid: "
	ownerNameLine     = "hyperfleet-owner: "
	namePrefixForList = "hf-"
)

var ownerLine = regexp.MustCompile(`(?m)^hyperfleet-owner-uid: ([0-9a-fA-F-]+)\s*$`)

func ownerTag(uid string) string { return ownerTagPrefix + strings.ToLower(uid) }

func description(o providers.Owner) string {
	return fmt.Sprintf("Managed by HyperFleet; deleting the MachineClaim deletes this VM.\n%s%s/%s\n%s%s\n",
		ownerNameLine, o.Namespace, o.Name, ownerDescription, o.UID)
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

func ownedBy(tags []string, desc string, owner providers.Owner) bool {
	uid := ownerUID(tags, desc)
	return uid != "" && uid == strings.ToLower(owner.UID)
}
