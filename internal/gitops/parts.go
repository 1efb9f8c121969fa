package gitops

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FinalizerPolicyDir is the component of the MachineClaim finalizer
// MutatingAdmissionPolicy (Kubernetes 1.36).
const FinalizerPolicyDir = "kustomize/components/machineclaim-finalizer"

// FinalizerPolicyAPI is what a cluster serves when it can run the finalizer
// policy, in the form of Helm's .Capabilities.APIVersions.Has.
const FinalizerPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

// WebhookIngressDir is the component of the webhook receiver's Ingress.
const WebhookIngressDir = "kustomize/components/webhook-ingress"

// ExternalSecretsFeatures are the external-secrets components, one per
// feature, under kustomize/components/external-secrets/.
var ExternalSecretsFeatures = []string{"proxmox", "github", "supabase", "hourglass"}

// Placeholders of the optional parts' values.
const (
	phStore       = "__HF_STORE__"
	phIngressHost = "__HF_INGRESS_HOST__"
)

// optionalPart is a component the chart carries behind a value: each object
// it adds to the base becomes a template under folder, rendered when
// condition holds; each flag it adds to the manager is added when the
// condition holds, before extraArgs. edit puts placeholders into an object.
type optionalPart struct {
	dir, folder, condition string
	edit                   func(u *unstructured.Unstructured) error
}

func optionalParts() []optionalPart {
	parts := []optionalPart{
		{dir: MonitoringDir, folder: "monitoring", condition: ".Values.monitoring.enabled"},
		{dir: FinalizerPolicyDir, folder: "admission", condition: `and .Values.machineClaimFinalizerPolicy.enabled (.Capabilities.APIVersions.Has "` + FinalizerPolicyAPI + `")`},
		{dir: WebhookIngressDir, folder: "ingress", condition: ".Values.webhookIngress.enabled", edit: ingressHost},
		// No object: the manager's arguments for the Hourglass build.
		{dir: HourglassOnlyDir, condition: ".Values.hourglassOnly.enabled"},
	}
	for _, f := range ExternalSecretsFeatures {
		parts = append(parts, optionalPart{
			dir: "kustomize/components/external-secrets/" + f, folder: "externalsecrets",
			condition: ".Values.externalSecrets." + f + ".enabled", edit: secretStore,
		})
	}
	return parts
}

// secretStore makes an ExternalSecret's ClusterSecretStore a value.
func secretStore(u *unstructured.Unstructured) error {
	if u.GetKind() != "ExternalSecret" {
		return nil
	}
	return unstructured.SetNestedField(u.Object, phStore, "spec", "secretStoreRef", "name")
}

// ingressHost makes the Ingress's host (in its rule and its TLS) a value.
func ingressHost(u *unstructured.Unstructured) error {
	if u.GetKind() != "Ingress" {
		return nil
	}
	for _, field := range []string{"rules", "tls"} {
		items, _, err := unstructured.NestedSlice(u.Object, "spec", field)
		if err != nil {
			return err
		}
		for _, it := range items {
			m, _ := it.(map[string]any)
			if _, ok := m["host"]; ok {
				m["host"] = phIngressHost
			}
			if hosts, ok := m["hosts"].([]any); ok {
				for i := range hosts {
					hosts[i] = phIngressHost
				}
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, items, "spec", field); err != nil {
			return err
		}
	}
	return nil
}

// partArgs are the manager flags a part adds to the base's, and the base's
// it drops.
type partArgs struct {
	condition     string
	args, removed []string
}

// changedArgs returns the manager flags in with that base lacks, and those
// of base that with lacks.
func changedArgs(base, with []*unstructured.Unstructured) (added, removed []string, err error) {
	args := func(objs []*unstructured.Unstructured) ([]string, error) {
		dep := Find(objs, "Deployment", ManagerName)
		if dep == nil {
			return nil, fmt.Errorf("no Deployment %s", ManagerName)
		}
		cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok && m["name"] == managerContainer {
				as, _, err := unstructured.NestedStringSlice(m, "args")
				return as, err
			}
		}
		return nil, fmt.Errorf("no container %s", managerContainer)
	}
	b, err := args(base)
	if err != nil {
		return nil, nil, err
	}
	w, err := args(with)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range w {
		if !slices.Contains(b, a) {
			added = append(added, a)
		}
	}
	for _, a := range b {
		if !slices.Contains(w, a) {
			removed = append(removed, a)
		}
	}
	return added, removed, nil
}

var extraArgsRange = regexp.MustCompile(`(?m)^\{\{- range \.Values\.extraArgs \}\}\n( *)- `)

// insertPartArgs adds the parts' flags to the manager's template, each
// behind its part's condition, before extraArgs (so an extra flag wins),
// and keeps the base's flags a part drops only while its condition does
// not hold.
func insertPartArgs(text string, parts []partArgs) (string, error) {
	for _, p := range parts {
		for _, a := range p.removed {
			line := regexp.MustCompile(`(?m)^( *)- ` + regexp.QuoteMeta(a) + `\n`)
			loc := line.FindStringIndex(text)
			if loc == nil {
				return "", fmt.Errorf("the manager's template has no argument %s to drop behind %s", a, p.condition)
			}
			text = text[:loc[0]] + fmt.Sprintf("{{- if not (%s) }}\n", p.condition) + text[loc[0]:loc[1]] + "{{- end }}\n" + text[loc[1]:]
		}
	}
	m := extraArgsRange.FindStringSubmatchIndex(text)
	if m == nil {
		return "", fmt.Errorf("the manager's template has no extraArgs")
	}
	indent := text[m[2]:m[3]]
	var b strings.Builder
	for _, p := range parts {
		if len(p.args) == 0 {
			continue
		}
		fmt.Fprintf(&b, "{{- if %s }}\n", p.condition)
		for _, a := range p.args {
			fmt.Fprintf(&b, "%s- %q\n", indent, a)
		}
		b.WriteString("{{- end }}\n")
	}
	return text[:m[0]] + b.String() + text[m[0]:], nil
}
