package kubevirt

import (
	"fmt"
	"sort"
	"strings"
)

// The placeholders the provider itself gives a value to in every
// VirtualMachine template. A caller adds its own through
// providers.KubeVirtSpec.Variables.
const (
	VarVMName         = "vm_name"
	VarNamespace      = "namespace"
	VarManagedBy      = "managed_by"
	VarUserDataBase64 = "user_data_base64"
)

// BuiltinVariables lists the provider's own placeholders, in the order
// documents show them.
var BuiltinVariables = []string{VarVMName, VarNamespace, VarManagedBy, VarUserDataBase64}

// Render replaces every ${name} in text with vars[name]. A placeholder that
// vars has no value for, or an unclosed "${", is an error naming it: a
// template typo must never become a silently empty field in a VM.
func Render(text string, vars map[string]string) (string, error) {
	var b strings.Builder
	b.Grow(len(text))
	rest := text
	line := 1
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		line += strings.Count(rest[:i], "\n")
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 || strings.ContainsAny(rest[i:i+end], "\n\"' ") {
			return "", fmt.Errorf("line %d: %q opens a placeholder that is never closed; write ${name} with one of %s", line, clip(rest[i:]), known(vars))
		}
		name := rest[i+2 : i+end]
		v, ok := vars[name]
		if !ok {
			return "", fmt.Errorf("line %d: unknown variable ${%s}; the template may use only %s", line, name, known(vars))
		}
		b.WriteString(v)
		rest = rest[i+end+1:]
	}
}

// known lists the variables of vars for an error message: the built-in
// ones in their order, then the caller's, sorted.
func known(vars map[string]string) string {
	var parts []string
	builtin := map[string]bool{}
	for _, k := range BuiltinVariables {
		builtin[k] = true
		if _, ok := vars[k]; ok {
			parts = append(parts, "${"+k+"}")
		}
	}
	var extra []string
	for k := range vars {
		if !builtin[k] {
			extra = append(extra, "${"+k+"}")
		}
	}
	sort.Strings(extra)
	parts = append(parts, extra...)
	if len(parts) == 0 {
		return "no variables"
	}
	return strings.Join(parts, ", ")
}

func clip(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}
