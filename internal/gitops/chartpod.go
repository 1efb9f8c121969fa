package gitops

import (
	"fmt"
	"regexp"
	"strings"
)

// The manager Pod's values a platform engineer sets per cluster, which the
// base leaves unset: each placeholder marks where its template block goes,
// and the block takes the placeholder line's indentation.
const (
	phPodSpec        = "__HF_POD_SPEC__"
	phPodAnnotations = "__HF_POD_ANNOTATIONS__"
	phExtraArgs      = "__HF_EXTRA_ARGS__"
)

// podSpecValues are the Pod spec fields set from values of the same name.
var podSpecValues = []string{"nodeSelector", "tolerations", "affinity", "imagePullSecrets", "topologySpreadConstraints"}

var (
	podSpecLine        = regexp.MustCompile(`(?m)^( *)` + phPodSpec + `: ""$`)
	podAnnotationsLine = regexp.MustCompile(`(?m)^( *)` + phPodAnnotations + `: ""$`)
	extraArgsLine      = regexp.MustCompile(`(?m)^( *)- ` + phExtraArgs + `$`)
)

// markPod puts the placeholders into the manager's Pod template (a
// Deployment's spec.template) and container.
func markPod(template, container map[string]any) {
	spec, _ := template["spec"].(map[string]any)
	spec[phPodSpec] = ""
	meta, _ := template["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
		meta["annotations"] = annotations
	}
	annotations[phPodAnnotations] = ""
	args, _ := container["args"].([]any)
	container["args"] = append(args, phExtraArgs)
}

// expandPod replaces the placeholders of markPod with template blocks.
func expandPod(text string) string {
	text = podSpecLine.ReplaceAllStringFunc(text, func(line string) string {
		indent := leadingSpaces(line)
		var b strings.Builder
		for i, field := range podSpecValues {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "{{- with .Values.%s }}\n%s%s:\n{{- toYaml . | nindent %d }}\n{{- end }}", field, strings.Repeat(" ", indent), field, indent+2)
		}
		return b.String()
	})
	text = podAnnotationsLine.ReplaceAllStringFunc(text, func(line string) string {
		return fmt.Sprintf("{{- with .Values.podAnnotations }}\n{{- toYaml . | nindent %d }}\n{{- end }}", leadingSpaces(line))
	})
	return extraArgsLine.ReplaceAllStringFunc(text, func(line string) string {
		return fmt.Sprintf("{{- range .Values.extraArgs }}\n%s- {{ . | quote }}\n{{- end }}", strings.Repeat(" ", leadingSpaces(line)))
	})
}

func leadingSpaces(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }
