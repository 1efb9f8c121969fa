package proxmox

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"

	"github.com/hyperfleet/hyperfleet/internal/proptest"
	"github.com/hyperfleet/hyperfleet/providers"
)

// markedVM is a VM's tag list and description as Proxmox may hand them
// back: HyperFleet's marks among foreign tags, in any order, any case, with
// any of the separators Proxmox accepts.
type markedVM struct {
	tags []string
	desc string
	sep  string
}

func (v markedVM) String() string {
	return fmt.Sprintf("tags %q desc %q", strings.Join(v.tags, v.sep), v.desc)
}

// read is the tag list as the provider reads it off the API.
func (v markedVM) read() []string { return splitTags(strings.Join(v.tags, v.sep)) }

// genUID is a claim UID (Kubernetes writes them lower case; the marks must
// not care).
func genUID() gopter.Gen {
	return gen.RegexMatch(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
}

// genInstallation is an installation id as installations are named.
func genInstallation() gopter.Gen { return gen.RegexMatch(`^[a-z][a-z0-9-]{0,15}$`) }

// genForeignTag is a tag someone else put on the VM: anything but one of
// HyperFleet's owner or installation marks (hf-started, "hyperfleet-x" and
// the like included, since those read as no ownership).
func genForeignTag() gopter.Gen {
	return gen.RegexMatch(`^[a-z0-9_][a-z0-9_.+-]{0,14}$`).SuchThat(func(t string) bool {
		return !strings.HasPrefix(t, ownerTagPrefix) && !strings.HasPrefix(t, installationTagPrefix)
	})
}

// shuffle writes tags in the order of the keys, each upper-cased where
// upper says so: a permutation and a case mangling drawn by gopter, so a
// failing case shrinks like any other.
func shuffle(tags []string, keys []uint16, upper []bool) []string {
	idx := make([]int, len(tags))
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) uint16 { return keys[i%len(keys)] }
	slices.SortStableFunc(idx, func(a, b int) int { return int(key(a)) - int(key(b)) })
	out := make([]string, len(tags))
	for i, j := range idx {
		out[i] = tags[j]
		if upper[i%len(upper)] {
			out[i] = strings.ToUpper(out[i])
		}
	}
	return out
}

var (
	genKeys  = gen.SliceOfN(16, gen.UInt16())
	genUpper = gen.SliceOfN(16, gen.Bool())
	genSep   = gen.OneConstOf(";", ",", " ")
)

// Property 26 (VM ownership and isolation): the marks a VM carries are read
// as sets. However Proxmox orders and cases the tags, and whatever foreign
// tags sit among them, a VM HyperFleet marked reads back as its owner's and
// its installation's, and as nobody else's.
func TestPropertyOwnershipMarksReadBackAsWritten(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("marks read back whatever the order, case and foreign tags", prop.ForAll(
			func(uid, inst, other string, foreignTags []string, withDesc bool, keys []uint16, upper []bool, sep string) string {
				owner := providers.Owner{UID: uid, Namespace: "ns", Name: "claim"}
				tags := append([]string{managedTag, ownerTag(uid), installationTag(inst)}, foreignTags...)
				vm := markedVM{tags: shuffle(tags, keys, upper), sep: sep}
				if withDesc {
					vm.desc = description(owner, inst)
				}
				got := vm.read()
				switch {
				case !ownedBy(got, vm.desc, owner, inst):
					return "not owned by its owner: " + vm.String()
				case foreign(got, vm.desc, inst):
					return "foreign to its own installation: " + vm.String()
				case ownerUID(got, vm.desc) != uid || installationOf(got, vm.desc) != inst:
					return fmt.Sprintf("read owner %q installation %q: %s", ownerUID(got, vm.desc), installationOf(got, vm.desc), vm.String())
				case other != inst && (ownedBy(got, vm.desc, owner, other) || !foreign(got, vm.desc, other)):
					return "taken by installation " + other + ": " + vm.String()
				}
				return ""
			},
			genUID(), genInstallation(), genInstallation(), gen.SliceOf(genForeignTag()), gen.Bool(), genKeys, genUpper, genSep,
		))
	})
}

// Property 26: two different owner marks (two owner tags, or an owner tag
// and a description line that disagree) make the VM nobody's: neither owner
// may adopt, power off or delete it, and it is foreign to every
// installation, whichever mark comes first.
func TestPropertyConflictingOwnerMarksAreRefused(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("two owners are always refused", prop.ForAll(
			func(uid1, uid2, inst string, foreignTags []string, inDesc bool, keys []uint16, upper []bool, sep string) string {
				a := providers.Owner{UID: uid1, Namespace: "ns", Name: "a"}
				b := providers.Owner{UID: uid2, Namespace: "ns", Name: "b"}
				tags := append([]string{managedTag, ownerTag(uid1), installationTag(inst)}, foreignTags...)
				vm := markedVM{sep: sep}
				if inDesc {
					vm.desc = description(b, inst)
				} else {
					tags = append(tags, ownerTag(uid2))
				}
				vm.tags = shuffle(tags, keys, upper)
				got := vm.read()
				m := readMarks(got, vm.desc)
				switch {
				case uid1 == uid2:
					return "" // one owner, twice: not this property's case
				case !m.conflicting():
					return "marks not conflicting: " + vm.String()
				case ownedBy(got, vm.desc, a, inst) || ownedBy(got, vm.desc, b, inst):
					return "owned despite two owners: " + vm.String()
				case !foreign(got, vm.desc, inst):
					return "not foreign despite two owners: " + vm.String()
				case ownerUID(got, vm.desc) != "":
					return "an owner read from two: " + vm.String()
				}
				return ""
			},
			genUID(), genUID(), genInstallation(), gen.SliceOf(genForeignTag()), gen.Bool(), genKeys, genUpper, genSep,
		))
	})
}
