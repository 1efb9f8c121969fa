package performer

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
	corev1 "k8s.io/api/core/v1"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/proptest"
)

// edit puts one value somewhere in the placement table: in a GPU type's
// selector (as key or value), a toleration's operator, effect or key, a TEE
// node selector or runtime class, or the GPU node label.
type edit struct {
	Where int
	TEE   string
	Name  string
	Value string
}

const editPlaces = 8

// apply writes e.Value into p at e.Where and returns the field path a
// refusal of it must name.
func (e edit) apply(p *Placement) string {
	tee := hourglassv1alpha1.TEEType(e.TEE)
	tp := p.TEE[tee]
	defer func() { p.TEE[tee] = tp }()
	switch e.Where {
	case 0:
		p.GPU.Types = map[string]map[string]string{e.Name: {e.Value: "x"}}
		return "gpu.types." + e.Name
	case 1:
		p.GPU.Types = map[string]map[string]string{e.Name: {"k": e.Value}}
		return "gpu.types." + e.Name + "[k]"
	case 2:
		p.GPU.Tolerations = append(p.GPU.Tolerations, corev1.Toleration{Operator: corev1.TolerationOperator(e.Value)})
		return fmt.Sprintf("gpu.tolerations[%d]", len(p.GPU.Tolerations)-1)
	case 3:
		p.GPU.Tolerations = append(p.GPU.Tolerations, corev1.Toleration{Effect: corev1.TaintEffect(e.Value)})
		return fmt.Sprintf("gpu.tolerations[%d]", len(p.GPU.Tolerations)-1)
	case 4:
		tp.NodeSelector = map[string]string{e.Value: "x"}
		return "tee." + e.TEE + ".nodeSelector"
	case 5:
		tp.Tolerations = append(tp.Tolerations, corev1.Toleration{Key: e.Value, Operator: corev1.TolerationOpExists})
		return fmt.Sprintf("tee.%s.tolerations[%d]", e.TEE, len(tp.Tolerations)-1)
	case 6:
		tp.RuntimeClassName = e.Value
		return "tee." + e.TEE + ".runtimeClassName"
	default:
		p.GPU.NodeLabel = e.Value
		return "gpu.nodeLabel"
	}
}

func genEdit(value gopter.Gen) gopter.Gen {
	return gen.Struct(reflect.TypeOf(edit{}), map[string]gopter.Gen{
		"Where": gen.IntRange(0, editPlaces-1),
		"TEE":   gen.OneConstOf("sgx", "sev", "tdx"),
		"Name":  gen.RegexMatch(`^[a-z][a-z0-9-]{0,8}$`),
		"Value": value,
	})
}

// genHostile is a value no field of the table accepts: it carries a space,
// a quote, a newline, a "${", YAML or selector syntax.
func genHostile() gopter.Gen {
	return gen.RegexMatch(`^[a-z]{0,4}( |"|'|\n|\$\{|: |#|,|=|!|\{)[a-z}]{0,4}$`)
}

// Property 22 (configuration management): the operator's placement table
// either validates or is refused with a message naming the field that is
// wrong, wherever in the table a bad value sits; a good value anywhere
// validates.
func TestPropertyPlacementRefusalsNameTheField(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("a bad value is refused by its field's name", prop.ForAll(
			func(e edit) string {
				pl := DefaultPlacement()
				field := e.apply(&pl)
				err := pl.Validate()
				switch {
				case err == nil:
					return fmt.Sprintf("%s = %q validated", field, e.Value)
				case !strings.Contains(err.Error(), field):
					return fmt.Sprintf("%s = %q refused without naming the field: %v", field, e.Value, err)
				}
				return ""
			},
			genEdit(genHostile()),
		))
		p.Property("a good value validates", prop.ForAll(
			func(e edit) string {
				pl := DefaultPlacement()
				if e.Where == 2 {
					e.Value = string(corev1.TolerationOpEqual)
				}
				if e.Where == 3 {
					e.Value = string(corev1.TaintEffectNoSchedule)
				}
				field := e.apply(&pl)
				if err := pl.Validate(); err != nil {
					return fmt.Sprintf("%s = %q refused: %v", field, e.Value, err)
				}
				return ""
			},
			genEdit(gen.RegexMatch(`^[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?$`)),
		))
	})
}
