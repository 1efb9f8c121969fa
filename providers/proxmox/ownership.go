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

// splitTags parses Proxmox's tag list (";" or "," or space separated). Tags
// come back lower case: Proxmox lowercases them on every write unless the
// datacenter's tag-style says case-sensitive, so every comparison here is
// made on lower case, whichever way the cluster stores them.
func splitTags(s string) []string {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
	for i := range f {
		f[i] = strings.ToLower(f[i])
	}
	return f
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

// marks is what a VM says about who made it: every owner UID and every
// installation id it carries, from its tags and its description lines,
// each once, in lower case. They are read as sets, so the order Proxmox
// stores tags in (sorted, or as written: the datacenter's tag-style) and
// their case change nothing.
type marks struct {
	owners, installations []string
}

func readMarks(tags []string, desc string) marks {
	var m marks
	add := func(to *[]string, v string) {
		if v = strings.ToLower(v); v != "" && !slices.Contains(*to, v) {
			*to = append(*to, v)
		}
	}
	for _, t := range tags {
		t = strings.ToLower(t)
		switch {
		case strings.HasPrefix(t, ownerTagPrefix):
			add(&m.owners, strings.TrimPrefix(t, ownerTagPrefix))
		case strings.HasPrefix(t, installationTagPrefix):
			add(&m.installations, strings.TrimPrefix(t, installationTagPrefix))
		}
	}
	for _, sm := range ownerLine.FindAllStringSubmatch(desc, -1) {
		add(&m.owners, sm[1])
	}
	for _, sm := range installationMark.FindAllStringSubmatch(desc, -1) {
		add(&m.installations, sm[1])
	}
	slices.Sort(m.owners)
	slices.Sort(m.installations)
	return m
}

// conflicting reports a VM carrying two different owners or two different
// installations: someone wrote a mark that is not HyperFleet's, and which
// one is true cannot be told, so the VM is nobody's to HyperFleet.
func (m marks) conflicting() bool { return len(m.owners) > 1 || len(m.installations) > 1 }

// owner is the one owner UID, "" when there is none or more than one.
func (m marks) owner() string {
	if len(m.owners) != 1 {
		return ""
	}
	return m.owners[0]
}

// installation is the one installation id, "" when there is none or more
// than one.
func (m marks) installation() string {
	if len(m.installations) != 1 {
		return ""
	}
	return m.installations[0]
}

// ConflictingMarksError is the refusal of a VM whose marks disagree (two
// owner tags, a tag and a description line naming different owners, two
// installations). HyperFleet neither adopts nor deletes such a VM: Create
// moves on to another VMID (it wraps providers.ErrNameTaken there), PowerOff
// and Delete refuse it (providers.ErrNotOwned), List leaves it out.
type ConflictingMarksError struct {
	VMID                  int
	Node                  string
	Owners, Installations []string
	// Err is the sentinel the caller decides on.
	Err error
}

func (e *ConflictingMarksError) Error() string {
	return fmt.Sprintf("VM %d on %s carries conflicting HyperFleet marks (owners %v, installations %v), so HyperFleet neither adopts nor deletes it: %v",
		e.VMID, e.Node, e.Owners, e.Installations, e.Err)
}

func (e *ConflictingMarksError) Unwrap() error { return e.Err }

func conflictError(vmid int, node string, m marks, sentinel error) error {
	return &ConflictingMarksError{VMID: vmid, Node: node, Owners: m.owners, Installations: m.installations, Err: sentinel}
}

// ownerUID reads the owner from tags and description; "" when there is
// none, or when they disagree.
func ownerUID(tags []string, desc string) string { return readMarks(tags, desc).owner() }

// unmarked reports a VM that names no owner at all: mid-clone, Proxmox
// shows only a temporary config.
func unmarked(tags []string, desc string) bool { return len(readMarks(tags, desc).owners) == 0 }

// installationOf reads the installation mark from tags and description; ""
// for a VM made before installations (or one whose marks disagree).
func installationOf(tags []string, desc string) string {
	return readMarks(tags, desc).installation()
}

// ownedBy reports whether the VM is owner's and this installation's (or
// unmarked, made before installations). A VM whose marks disagree is never.
func ownedBy(tags []string, desc string, owner providers.Owner, installation string) bool {
	m := readMarks(tags, desc)
	if m.conflicting() {
		return false
	}
	uid := m.owner()
	if uid == "" || uid != strings.ToLower(owner.UID) {
		return false
	}
	mark := m.installation()
	return mark == "" || mark == installation
}

// foreign reports whether the VM is marked for another installation, or
// carries marks that disagree: never listed, never touched.
func foreign(tags []string, desc, installation string) bool {
	m := readMarks(tags, desc)
	if m.conflicting() {
		return true
	}
	mark := m.installation()
	return mark != "" && mark != installation
}

// reservedTagPrefixes are the tags HyperFleet writes itself. A tenant's tag
// with one of them could forge or blur a VM's ownership, so tags from a
// HypervisorCluster or a template never may.
var reservedTagPrefixes = []string{managedTag, ownerTagPrefix, installationTagPrefix, startedTag}

// reservedPrefix returns the reserved prefix tag starts with, if any.
func reservedPrefix(tag string) (string, bool) {
	t := strings.ToLower(strings.TrimSpace(tag))
	for _, p := range reservedTagPrefixes {
		if strings.HasPrefix(t, p) {
			return p, true
		}
	}
	return "", false
}

// checkTenantTags refuses tags a tenant wrote (field names where) that
// carry a reserved prefix, as a Permanent error naming the field.
func checkTenantTags(field string, tags []string) error {
	for _, t := range tags {
		if p, ok := reservedPrefix(t); ok {
			return providers.Permanent("ReservedTag", fmt.Sprintf(
				"%s holds the tag %q, which starts with %q: tags starting with %v are HyperFleet's own ownership marks; remove it",
				field, t, p, reservedTagPrefixes), nil)
		}
	}
	return nil
}

// withoutReserved drops the reserved tags from tags: what a clone inherited
// from its template is kept, but never as a mark.
func withoutReserved(tags []string) []string {
	return slices.DeleteFunc(slices.Clone(tags), func(t string) bool { _, ok := reservedPrefix(t); return ok })
}
