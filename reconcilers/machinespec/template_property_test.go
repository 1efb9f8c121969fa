package machinespec_test

import (
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/hyperfleet/hyperfleet/internal/proptest"
	cyberdesktemplate "github.com/hyperfleet/hyperfleet/kustomize/cyberdesk"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/reconcilers/machinespec"
)

// vars are the values a KubeVirt template renders with: the provider's own
// and machinespec's for an owner named owner.
func vars(vmName, ns, owner, managedBy, userDataBase64 string) map[string]string {
	v := machinespec.Variables(owner)
	v[kubevirt.VarVMName], v[kubevirt.VarNamespace] = vmName, ns
	v[kubevirt.VarManagedBy], v[kubevirt.VarUserDataBase64] = managedBy, userDataBase64
	return v
}

// shippedTemplate is the Cyberdesk VirtualMachine template the base ships.
func shippedTemplate(t *testing.T) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := yaml.Unmarshal(cyberdesktemplate.VMTemplateConfigMap, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data["template.yaml"]
}

// yamlLookalikes are names Kubernetes accepts that YAML 1.1, left
// unquoted, reads as something other than a string: numbers, booleans,
// null.
var yamlLookalikes = []any{"123", "0", "1.5", "1e5", "0x1f", "0o17", "y", "n", "yes", "no", "on", "off", "true", "false", "null"}

// genLabel is a DNS label (a namespace, a managed-by value), YAML
// look-alikes included.
func genLabel() gopter.Gen {
	return gen.OneGenOf(gen.RegexMatch(`^[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?$`), gen.OneConstOf(yamlLookalikes...))
}

// genObjectName is an object name (a DNS subdomain), look-alikes included.
func genObjectName() gopter.Gen {
	return gen.OneGenOf(gen.RegexMatch(`^[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?$`), gen.OneConstOf(yamlLookalikes...))
}

// Property 3 (template validation and management): every value the
// Cyberdesk template's ${} variables can take (a namespace, a desk's name,
// the machine name derived from them, any user data) renders into a
// VirtualMachine that parses, with each value in its own field, as it was:
// no value that merely looks like a number, a boolean or null to YAML
// changes type or breaks the document.
func TestPropertyCyberdeskTemplateKeepsValuesInTheirFields(t *testing.T) {
	tmpl := shippedTemplate(t)
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("rendered values round-trip", prop.ForAll(
			func(ns, desk, managedBy string, userData []byte) string {
				vmName := providers.MachineName(providers.Owner{Namespace: ns, Name: desk})
				ud := base64.StdEncoding.EncodeToString(userData)
				text, err := kubevirt.Render(tmpl, vars(vmName, ns, desk, managedBy, ud))
				if err != nil {
					return "render: " + err.Error()
				}
				vm := &kubevirtv1.VirtualMachine{}
				if err := yaml.UnmarshalStrict([]byte(text), vm); err != nil {
					return fmt.Sprintf("namespace %q desk %q managed-by %q: the rendered template does not parse: %v", ns, desk, managedBy, err)
				}
				var volumeUD string
				if vm.Spec.Template != nil {
					for _, v := range vm.Spec.Template.Spec.Volumes {
						if v.CloudInitNoCloud != nil {
							volumeUD = v.CloudInitNoCloud.UserDataBase64
						}
					}
				}
				got := []string{vm.Name, vm.Namespace, vm.Labels["cyberdesk.io/name"], vm.Labels["app.kubernetes.io/managed-by"], volumeUD}
				want := []string{vmName, ns, desk, managedBy, ud}
				for i := range want {
					if got[i] != want[i] {
						return fmt.Sprintf("field %d reads %q, want %q", i, got[i], want[i])
					}
				}
				if vm.Spec.Template.ObjectMeta.Labels["kubevirt.io/vm"] != vmName {
					return fmt.Sprintf("kubevirt.io/vm reads %q, want %q", vm.Spec.Template.ObjectMeta.Labels["kubevirt.io/vm"], vmName)
				}
				return ""
			},
			genLabel(), genObjectName(), genLabel(), gen.SliceOf(gen.UInt8()),
		))
	})
}

// The smallest case the property found before the template quoted its
// placeholders: the namespace "0o17" read back as the number 15.
func TestCyberdeskTemplateKeepsANumberLikeNamespace(t *testing.T) {
	text, err := kubevirt.Render(shippedTemplate(t), vars("hf-0o17-d", "0o17", "d", "m", ""))
	if err != nil {
		t.Fatal(err)
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := yaml.UnmarshalStrict([]byte(text), vm); err != nil || vm.Namespace != "0o17" {
		t.Errorf("namespace reads %q (%v), want \"0o17\"", vm.Namespace, err)
	}
}
