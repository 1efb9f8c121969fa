//go:build !hourglass

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	cases := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{nil, 2, "", "Usage: hyperfleet <command>"},
		{[]string{"help"}, 0, "", "run      Run the manager"},
		// The sandbox is not in the product binary.
		{[]string{"dev"}, 2, "", `unknown command "dev"`},
		{[]string{"version"}, 0, "hyperfleet ", ""},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"run", "--log-level", "loud"}, 1, "", `hyperfleet run: --log-level="loud"`},
		{[]string{"run", "extra"}, 1, "", `unexpected arguments ["extra"]`},
		{[]string{"help"}, 0, "", "release-finalizers With the operator gone"},
		{[]string{"release-finalizers"}, 1, "", "hyperfleet release-finalizers: --namespace is required"},
		{[]string{"release-finalizers", "--namespace", "team-a", "extra"}, 1, "", `unexpected arguments ["extra"]`},
		{[]string{"release-finalizers", "-h"}, 0, "", "so NS can be deleted"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		code := dispatch(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.inStdout) || !strings.Contains(stderr.String(), tc.inStderr) {
			t.Errorf("hyperfleet %q: exit %d, stdout %q, stderr %q; want exit %d with %q / %q",
				tc.args, code, stdout.String(), stderr.String(), tc.code, tc.inStdout, tc.inStderr)
		}
	}
}

// The manager must refuse to start without a cluster, saying what to do.
func TestRunWithoutAClusterExplainsItself(t *testing.T) {
	t.Setenv("KUBECONFIG", t.TempDir()+"/missing")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("HOME", t.TempDir())
	var stdout, stderr bytes.Buffer
	code := dispatch([]string{"run", "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "try 'make dev'") {
		t.Fatalf("exit %d, stderr %q; want exit 1 pointing at the sandbox", code, stderr.String())
	}
}

// release-finalizers, too, refuses without a cluster and says what to do;
// its work is tested on a cluster in internal/uninstall.
func TestReleaseFinalizersWithoutAClusterExplainsItself(t *testing.T) {
	t.Setenv("KUBECONFIG", t.TempDir()+"/missing")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("HOME", t.TempDir())
	var stdout, stderr bytes.Buffer
	code := dispatch([]string{"release-finalizers", "--namespace", "team-a"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "pass --kubeconfig") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming --kubeconfig", code, stderr.String())
	}
}
