// Package alerts_test checks alerts/prometheusrule.yaml with promtool, from
// Debian's prometheus package (hack/promtool.sh installs it; make alerts).
package alerts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtool finds promtool: $PROMTOOL, else on PATH. A missing promtool
// fails the test (`make test` installs it first, through `make alerts`).
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed; `make alerts` (hack/promtool.sh) installs Debian's prometheus package")
	}
	return p
}

// rulesDir writes the PrometheusRule's spec as a plain rules file beside a
// copy of the unit tests, which name it rules.yaml.
func rulesDir(t *testing.T) (string, []string) {
	t.Helper()
	data, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Kind string         `json:"kind"`
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" || pr.Spec["groups"] == nil {
		t.Fatalf("prometheusrule.yaml holds a %q with no groups", pr.Kind)
	}
	rules, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := filepath.Glob(filepath.Join("tests", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no tests in alerts/tests: %v", err)
	}
	var names []string
	for _, f := range tests {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(f))
	}
	return dir, names
}

func run(t *testing.T, dir, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestRulesCheck(t *testing.T) {
	bin := promtool(t)
	dir, _ := rulesDir(t)
	run(t, dir, bin, "check", "rules", "rules.yaml")
}

// Each alert's unit tests: it fires when it should and stays quiet when not.
func TestRulesUnitTests(t *testing.T) {
	bin := promtool(t)
	dir, tests := rulesDir(t)
	for _, f := range tests {
		t.Run(strings.TrimSuffix(f, ".yaml"), func(t *testing.T) {
			run(t, dir, bin, "test", "rules", f)
		})
	}
}

// groupings are PromQL's label lists of aggregations and vector matches:
// by (...), without (...), on (...), ignoring (...).
var groupings = regexp.MustCompile(`\b(by|without|on|ignoring)\s*\(([^)]*)\)`)

// Every aggregation and vector match keeps the label cluster, so a
// multi-cluster or global ruler does not merge clusters (a cluster without
// a leader hidden by another's, counts of two clusters summed):
// HyperFleetNoLeader's unit tests show one such case.
func TestRulesKeepCluster(t *testing.T) {
	data, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			for _, m := range groupings.FindAllStringSubmatch(r.Expr, -1) {
				seen++
				labels := strings.Split(m[2], ",")
				for i := range labels {
					labels[i] = strings.TrimSpace(labels[i])
				}
				switch keeps := slices.Contains(labels, "cluster"); {
				case (m[1] == "by" || m[1] == "on") && !keeps:
					t.Errorf("%s: %s drops the label cluster", r.Alert, m[0])
				case (m[1] == "without" || m[1] == "ignoring") && keeps:
					t.Errorf("%s: %s drops the label cluster", r.Alert, m[0])
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no aggregation found in prometheusrule.yaml")
	}
}
