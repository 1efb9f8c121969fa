package gitops

import (
	"fmt"
	"regexp"
)

// Helm's standard labels go on every object the chart renders, so tools that
// select a release's objects (helm, dashboards, policy engines) find them;
// Deployment selectors keep the base's labels, as a selector cannot change.
const (
	phHelmLabels = "__HF_HELM_LABELS__"
	appNameLabel = "app.kubernetes.io/name"
	appName      = "hyperfleet"
)

var helmLabelsLine = regexp.MustCompile(`(?m)^( *)` + phHelmLabels + `: ""$`)

// helmLabelsHelper is the named template of the labels the release adds.
const helmLabelsHelper = `{{/* Helm's standard labels of the release, on every object. */}}
{{- define "hyperfleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
`

// markLabels puts the release's labels, and app.kubernetes.io/name where the
// base leaves it out, into an object's metadata.
func markLabels(obj map[string]any) {
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
		meta["labels"] = labels
	}
	if _, ok := labels[appNameLabel]; !ok {
		labels[appNameLabel] = appName
	}
	labels[phHelmLabels] = ""
}

// expandLabels replaces the placeholder of markLabels.
func expandLabels(text string) string {
	return helmLabelsLine.ReplaceAllStringFunc(text, func(line string) string {
		return fmt.Sprintf(`{{- include "hyperfleet.labels" . | nindent %d }}`, leadingSpaces(line))
	})
}
