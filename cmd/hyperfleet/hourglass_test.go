//go:build hourglass

package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The Hourglass build's commands: run and version, and none of the
// machines' side.
func TestTheHourglassBuildHasNoMachineCommands(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("help: exit %d, %s", code, stderr.String())
	}
	help := stderr.String() + stdout.String()
	for _, want := range []string{"run ", "version "} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	for _, cmd := range []string{"tpm-provision", "release-finalizers"} {
		if strings.Contains(help, cmd) {
			t.Errorf("help lists %s:\n%s", cmd, help)
		}
		stdout.Reset()
		stderr.Reset()
		if code := dispatch([]string{cmd}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "unknown command") {
			t.Errorf("%s: exit %d, %q; want an unknown command", cmd, code, stderr.String())
		}
	}
}

// The hourglass-only component's manager arguments are ones the Hourglass
// build takes: run with them, it gets past its flags to the cluster
// (absent here) instead of refusing one.
func TestTheHourglassComponentsArgumentsParse(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "kustomize", "components", "hourglass-only", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Patches []struct {
			Patch string `json:"patch"`
		} `json:"patches"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil || len(k.Patches) != 1 {
		t.Fatalf("the component: %v, %d patches; want one", err, len(k.Patches))
	}
	var ops []struct {
		Path  string   `json:"path"`
		Value []string `json:"value"`
	}
	if err := yaml.Unmarshal([]byte(k.Patches[0].Patch), &ops); err != nil || len(ops) != 1 || len(ops[0].Value) < 2 {
		t.Fatalf("the component's patch: %v, %+v", err, ops)
	}
	args := ops[0].Value
	if args[0] != "run" || !slices.Contains(args, "--controllers=hourglass") {
		t.Fatalf("arguments %q: want run with --controllers=hourglass", args)
	}
	t.Setenv("POD_NAME", "hyperfleet-manager-0")
	t.Setenv("POD_NAMESPACE", "hyperfleet-system")
	var stderr bytes.Buffer
	err = runManager(append(args[1:], "--kubeconfig="+filepath.Join(t.TempDir(), "absent")), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("run %q: %v (%s); want it past its flags, failing on the missing kubeconfig", args, err, stderr.String())
	}
}
