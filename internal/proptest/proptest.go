// Package proptest runs the gopter property tests the same way everywhere:
// with a fixed seed, so `make test` is deterministic and a failure seen in
// CI is a failure seen at a desk, and with the seed and the number of cases
// overridable from the environment, to search harder on purpose.
//
//	PROPERTY_SEED   the seed (default DefaultSeed)
//	PROPERTY_CASES  successful cases each property needs (default DefaultCases,
//	                or the test's own default for one that drives a real API
//	                server: CheckCostly)
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
	return parameters(t, DefaultCases)
}

// MaxCostlyShrinks bounds how many shrunk cases CheckCostly tries after a
// failure: each one is a real case again, seconds long.
const MaxCostlyShrinks = 8

func parameters(t testing.TB, defaultCases int) *gopter.TestParameters {
	t.Helper()
	seed := DefaultSeed
	if v := os.Getenv("PROPERTY_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("PROPERTY_SEED=%q is not an integer: %v", v, err)
		}
		seed = s
	}
	cases := defaultCases
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

// Stateful are the parameters of a state-machine property (gopter's
// commands package) that drives a real API server: each case is a whole
// sequence run against the operator, seconds rather than microseconds, so
// by default only defaultSequences of them, each of at most maxSteps
// commands, and a failing sequence is shrunk at most maxShrinks times (each
// shrink attempt replays a sequence). PROPERTY_CASES overrides the number
// of sequences as it does the cases of a pure property.
func Stateful(t testing.TB, defaultSequences, maxSteps, maxShrinks int) *gopter.TestParameters {
	t.Helper()
	p := parameters(t, defaultSequences)
	p.MaxSize = maxSteps
	p.MinSize = maxSteps
	p.MaxShrinkCount = maxShrinks
	return p
}

// Check defines the properties with define and checks them. gopter's
// report (the shrunk failing arguments) goes to the test log, and a failure
// says how to replay it: the seed alone reproduces the run, since every
// case is drawn from it in order.
func Check(t *testing.T, define func(*gopter.Properties)) {
	t.Helper()
	CheckWith(t, Parameters(t), define)
}

// CheckCostly is Check for a property whose every case costs seconds (it
// drives the real API server and the operator): it needs defaultCases
// successful cases unless PROPERTY_CASES says otherwise, and shrinks a
// failure at most MaxCostlyShrinks times. The seed is read as for Check.
func CheckCostly(t *testing.T, defaultCases int, define func(*gopter.Properties)) {
	t.Helper()
	params := parameters(t, defaultCases)
	params.MaxShrinkCount = MaxCostlyShrinks
	CheckWith(t, params, define)
}

// CheckWith is Check with parameters of the caller's (Stateful).
func CheckWith(t *testing.T, params *gopter.TestParameters, define func(*gopter.Properties)) {
	t.Helper()
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

// CheckSequences is CheckCostly for a state machine whose sequences vary in
// length: cases sequences unless PROPERTY_CASES says otherwise, each of
// minSize up to maxSize commands, and at most maxShrinks attempts to shrink
// a failure, each a whole sequence again.
func CheckSequences(t *testing.T, cases, minSize, maxSize, maxShrinks int, define func(*gopter.Properties)) {
	t.Helper()
	params := parameters(t, cases)
	params.MinSize, params.MaxSize, params.MaxShrinkCount = minSize, maxSize, maxShrinks
	CheckWith(t, params, define)
}
