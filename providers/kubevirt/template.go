package kubevirt

import (
	"fmt"
	"strings"
)

// The placeholders a VirtualMachine template may use: the Cyberdesk
// operator's set, kept so its templates work unchanged.
const (
	VarVMName         = "vm_name"
	VarNamespace      = "namespace"
	VarCyberdeskName  = "cyberdesk_name"
	VarManagedBy      = "managed_by"
	VarUserDataBase64 = "user_data_base64"
)

// KnownVariables lists the placeholders, in the order documents show them.
var KnownVariables = []string{VarVMName, VarNamespace, VarCyberdeskName, VarManagedBy, VarUserDataBase64}

// Render replaces every ${name} in text with vars[name]. A placeholder that
// is not one of KnownVariables, one with no value in vars, or an unclosed
// "${" is an error naming it: a template typo must never become a silently
// empty field in a VM.
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
			return "", fmt.Errorf("line %d: %q opens a placeholder that is never closed; write ${name} with one of %s", line, clip(rest[i:]), known())
		}
		name := rest[i+2 : i+end]
		if !isKnown(name) {
			return "", fmt.Errorf("line %d: unknown variable ${%s}; the template may use only %s", line, name, known())
		}
		v, ok := vars[name]
		if !ok {
			return "", fmt.Errorf("line %d: variable ${%s} has no value here", line, name)
		}
		b.WriteString(v)
		rest = rest[i+end+1:]
	}
}

func isKnown(name string) bool {
	for _, k := range KnownVariables {
		if k == name {
			return true
		}
	}
	return false
}

func known() string {
	parts := make([]string, len(KnownVariables))
	for i, k := range KnownVariables {
		parts[i] = "${" + k + "}"
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
