package providers_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hyperfleet/hyperfleet/internal/proptest"
	"github.com/hyperfleet/hyperfleet/providers"
)

// genNamespace is a namespace name: a DNS label.
func genNamespace() gopter.Gen {
	return gen.OneGenOf(
		gen.RegexMatch(`^[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?$`),
		gen.RegexMatch(`^[a-z0-9]([a-z0-9-]{40,61}[a-z0-9])?$`),
	)
}

// claimName is a MachineClaim name (a DNS subdomain) as its parts: two
// names with the same parts and different separators are the ones a
// mapping to a DNS label most easily merges ("a.b" and "a-b").
type claimName struct {
	parts []string
	dots  []bool
}

func (c claimName) String() string {
	var b strings.Builder
	for i, p := range c.parts {
		if i > 0 {
			b.WriteString(map[bool]string{true: ".", false: "-"}[c.dots[(i-1)%len(c.dots)]])
		}
		b.WriteString(p)
	}
	return b.String()
}

// genClaimParts is the parts of a claim name: short ones mostly, and
// sometimes a long one, to reach the 63-character limit of a DNS label.
func genClaimParts() gopter.Gen {
	part := gen.OneGenOf(gen.RegexMatch(`^[a-z0-9]{1,8}$`), gen.RegexMatch(`^[a-z0-9]{20,60}$`))
	return gen.IntRange(1, 6).FlatMap(func(n any) gopter.Gen { return gen.SliceOfN(n.(int), part) }, reflect.TypeOf([]string{}))
}

var genDots = gen.SliceOfN(6, gen.Bool())

// Property 26 (VM ownership and isolation): every claim's machine name is
// valid for every backend: a DNS label, which is what a Proxmox VM name and
// a KubeVirt VirtualMachine (and the hostname its guest gets) must be, with
// room for the "-cloudinit" Secret beside it.
func TestPropertyMachineNameIsADNSLabel(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("valid DNS label", prop.ForAll(
			func(ns string, parts []string, dots []bool) string {
				name := claimName{parts, dots}.String()
				if len(validation.IsDNS1123Subdomain(name)) > 0 {
					return "" // not a name the API server accepts
				}
				got := providers.MachineName(providers.Owner{Namespace: ns, Name: name})
				if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
					return fmt.Sprintf("%s/%s gives %q: %v", ns, name, got, errs)
				}
				if errs := validation.IsDNS1123Subdomain(got + "-cloudinit"); len(errs) > 0 {
					return fmt.Sprintf("%s/%s gives %q, whose Secret name is invalid: %v", ns, name, got, errs)
				}
				return ""
			},
			genNamespace(), genClaimParts(), genDots,
		))
	})
}

// Property 26: two claims of one namespace never get the same machine name.
// KubeVirt names its VirtualMachine after the claim, in the claim's
// namespace, and offers no other name when it is taken, so a shared name
// would leave the second claim stuck; Proxmox tells its VMs apart by VMID
// and owner UID and needs no more than this. The two names are generated
// from the same parts with different separators, or from parts sharing a
// long prefix, which is where a lossy mapping would merge them.
func TestPropertyMachineNamesAreUniquePerNamespace(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("distinct claims, distinct machines", prop.ForAll(
			func(ns string, parts []string, dots1, dots2 []bool, last string) string {
				a := claimName{parts, dots1}.String()
				b := claimName{parts, dots2}.String()
				if a == b {
					b = claimName{append(parts[:len(parts):len(parts)], last), dots2}.String()
				}
				if len(validation.IsDNS1123Subdomain(a)) > 0 || len(validation.IsDNS1123Subdomain(b)) > 0 || a == b {
					return ""
				}
				ma := providers.MachineName(providers.Owner{Namespace: ns, Name: a})
				mb := providers.MachineName(providers.Owner{Namespace: ns, Name: b})
				if ma == mb {
					return fmt.Sprintf("%s/%s and %s/%s both get %q", ns, a, ns, b, ma)
				}
				return ""
			},
			genNamespace(), genClaimParts(), genDots, genDots, gen.RegexMatch(`^[a-z0-9]{1,8}$`),
		))
	})
}

// The smallest case the uniqueness property found: a dot and a dash in the
// same place named the same VirtualMachine.
func TestMachineNameTellsDotFromDash(t *testing.T) {
	dot := providers.MachineName(providers.Owner{Namespace: "ci", Name: "a.b"})
	dash := providers.MachineName(providers.Owner{Namespace: "ci", Name: "a-b"})
	if dot == dash {
		t.Errorf("ci/a.b and ci/a-b both get %q", dot)
	}
	if dash != "hf-ci-a-b" {
		t.Errorf("ci/a-b gets %q; a name that maps to a label unchanged keeps its plain form", dash)
	}
}
