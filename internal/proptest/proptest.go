// Package proptest runs the gopter property tests the same way everywhere:
// with a fixed seed, so `make test` is deterministic and a failure seen in
// CI is a failure seen at a desk, and with the seed and the number of cases
// overridable from the environment, to search harder on purpose.
//
//	PROPERTY_SEED   the seed (default DefaultSeed)
//	PROPERTY_CASES  successful cases each property needs (default DefaultCases)
package proptest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/leanovate/gopter"
)

const (
	// DefaultSeed is fixed: a property that passes in CI passes here.
	DefaultSeed int64 = 20261128
	// DefaultCases keeps every property test of a package well under a
	// second with -race; PROPERTY_CASES searches harder.
	DefaultCases = 300
)

// Parameters are gopter's test parameters with the seed and the number of
// cases read from PROPERTY_SEED and PROPERTY_CASES. A value that does not
// parse fails t rather than silently running the defaults.
func Parameters(t testing.TB) *gopter.TestParameters {
	t.Helper()
	seed := DefaultSeed
	if v := os.Getenv("PROPERTY_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("PROPERTY_SEED=%q is not an integer: %v", v, err)
		}
		seed = s
	}
	cases := DefaultCases
	if v := os.Getenv("PROPERTY_CASES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("PROPERTY_CASES=%q is not a positive integer", v)
		}
		cases = n
	}
	p := gopter.DefaultTestParametersWithSeed(seed)
	p.MinSuccessfulTests = cases
	return p
}

// Check defines the properties with define and checks them. gopter's
// report (the shrunk failing arguments) goes to the test log, and a failure
// says how to replay it: the seed alone reproduces the run, since every
// case is drawn from it in order.
func Check(t *testing.T, define func(*gopter.Properties)) {
	t.Helper()
	params := Parameters(t)
	props := gopter.NewProperties(params)
	define(props)
	var out bytes.Buffer
	ok := props.Run(gopter.NewFormatedReporter(true, 160, &out))
	t.Log("\n" + out.String())
	if !ok {
		t.Errorf("property failed with seed %d; reproduce with:\n  PROPERTY_SEED=%d PROPERTY_CASES=%d go test -count=1 -run '^%s$' %s",
			params.Seed(), params.Seed(), params.MinSuccessfulTests, t.Name(), packageDir())
	}
}

// packageDir is the test's package as a path from the module root ("./x/y"),
// so the reproduce line can be pasted at the root; "." if it cannot tell.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return "."
		}
	}
}

// CheckCostly is Check for a property whose every case is costly (a
// sequence of commands against a real API server and the simulators):
// cases successful cases unless PROPERTY_CASES says otherwise, sizes (the
// length of a command sequence) from minSize up to maxSize, and at most
// maxShrinks attempts to shrink a failure, each a whole case again.
func CheckCostly(t *testing.T, cases, minSize, maxSize, maxShrinks int, define func(*gopter.Properties)) {
	t.Helper()
	params := Parameters(t)
	if os.Getenv("PROPERTY_CASES") == "" {
		params.MinSuccessfulTests = cases
	}
	params.MinSize, params.MaxSize, params.MaxShrinkCount = minSize, maxSize, maxShrinks
	props := gopter.NewProperties(params)
	define(props)
	var out bytes.Buffer
	ok := props.Run(gopter.NewFormatedReporter(true, 160, &out))
	t.Log("\n" + out.String())
	if !ok {
		t.Errorf("property failed with seed %d; reproduce with:\n  PROPERTY_SEED=%d PROPERTY_CASES=%d go test -count=1 -run '^%s$' %s",
			params.Seed(), params.Seed(), params.MinSuccessfulTests, t.Name(), packageDir())
	}
}
