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
		inStderr string
	}{
		{[]string{"-h"}, 0, "-samples-namespace"},
		{[]string{"enqueue-jobs", "-h"}, 0, "-github-sim"},
		{[]string{"enqueue-jobs", "--count", "0"}, 1, "--count must be between 1 and 1000"},
		{[]string{"enqueue-jobs", "--mode", "poll"}, 1, `--mode must be webhook or scale-set, not "poll"`},
		{[]string{"stray"}, 1, `unexpected arguments ["stray"]`},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		code := dispatch(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.inStderr) {
			t.Errorf("hyperfleet-dev %q: exit %d, stderr %q; want exit %d with %q", tc.args, code, stderr.String(), tc.code, tc.inStderr)
		}
	}
}
