package main

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
)

// The rendered install holds every object of the base, CRDs first, with the
// manager on the given image and no other image of ours left.
func TestRenderSetsTheReleaseImage(t *testing.T) {
	const image = "ghcr.io/hyperfleet/hyperfleet@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	var out bytes.Buffer
	if err := render(&out, "../..", image); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "ghcr.io/hyperfleet/hyperfleet"); n != 2 { // the header and the container
		t.Errorf("the image appears %d times, want the header and the manager only:\n%s", n, out.String())
	}
	dec := yaml.NewYAMLOrJSONDecoder(&out, 4096)
	var kinds []string
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			break
		}
		if obj == nil {
			continue
		}
		kinds = append(kinds, obj["kind"].(string))
	}
	if len(kinds) < 10 || kinds[0] != "Namespace" && kinds[0] != "CustomResourceDefinition" {
		t.Fatalf("rendered kinds %v: want the base's objects, Namespace and CRDs first", kinds)
	}
	if err := render(&out, "../..", ""); err == nil {
		t.Error("render without an image succeeded")
	}
}
