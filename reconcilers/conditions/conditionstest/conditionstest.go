// Package conditionstest holds the checks every kind's status test makes
// on the summary its computeStatus returns, so each kind tests its own
// cases and not, again, what conditions promises all of them.
package conditionstest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// timestamp matches a date or a time of day. No condition message may hold
// one: it would make every status write a change (see conditions.Summary).
var timestamp = regexp.MustCompile(`\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}:\d{2}`)

// NoTimestamp fails t if msg carries a date or a time of day.
func NoTimestamp(t testing.TB, msg string) {
	t.Helper()
	if timestamp.MatchString(msg) {
		t.Errorf("the message carries a timestamp: %q", msg)
	}
}

// finalize writes s on obj as the skeleton's finalize-status step does: the
// conditions for obj's generation and, after a successful reconcile,
// observedGeneration.
func finalize(obj conditions.Checked, s conditions.Summary, reconciled bool) {
	conditions.Set(obj, obj.GetGeneration(), s)
	if reconciled {
		obj.SetObservedGeneration(obj.GetGeneration())
	}
}

// NoViolations fails t if obj breaks the kstatus contract
// (conditions.Violations).
func NoViolations(t testing.TB, obj conditions.Checked, reconciled bool) {
	t.Helper()
	if v := conditions.Violations(obj, reconciled); len(v) > 0 {
		t.Errorf("kstatus violations: %s", strings.Join(v, "; "))
	}
}

// CheckSummary checks s's message for timestamps, finalizes s on obj and
// checks the result against kstatus: what every status test asks of every
// summary it gets.
func CheckSummary(t testing.TB, obj conditions.Checked, s conditions.Summary, reconciled bool) {
	t.Helper()
	NoTimestamp(t, s.Message)
	finalize(obj, s, reconciled)
	NoViolations(t, obj, reconciled)
}
