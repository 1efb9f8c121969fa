package testenv

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// The kstatus check runs after every reconcile of every kind in every suite:
// the shared finalize-status step hands each object to it, and any broken
// object fails the test that owns its namespace (or the package, for a
// namespace no test made).
var violations = struct {
	sync.Mutex
	byNamespace map[string][]string
}{byNamespace: map[string][]string{}}

func installKstatusCheck() {
	skeleton.SetCheck(func(obj skeleton.Object, concluded bool) {
		v := conditions.Violations(obj, concluded)
		if len(v) == 0 {
			return
		}
		kind := fmt.Sprintf("%T", obj)
		kind = kind[strings.LastIndex(kind, ".")+1:]
		msg := fmt.Sprintf("%s %s/%s (generation %d): %s", kind, obj.GetNamespace(), obj.GetName(), obj.GetGeneration(), strings.Join(v, "; "))
		violations.Lock()
		violations.byNamespace[obj.GetNamespace()] = append(violations.byNamespace[obj.GetNamespace()], msg)
		violations.Unlock()
	})
}

// checkKstatus fails t with every violation recorded in namespace.
func checkKstatus(t testing.TB, namespace string) {
	t.Helper()
	violations.Lock()
	v := violations.byNamespace[namespace]
	delete(violations.byNamespace, namespace)
	violations.Unlock()
	for _, msg := range v {
		t.Errorf("kstatus check: %s", msg)
	}
}

// remainingViolations returns what was recorded in namespaces no test owns.
func remainingViolations() []string {
	violations.Lock()
	defer violations.Unlock()
	var out []string
	for _, v := range violations.byNamespace {
		out = append(out, v...)
	}
	sort.Strings(out)
	return out
}

// KstatusViolations returns, and forgets, what the kstatus check recorded
// in namespace so far: for a test that checks it at a moment of its own
// choosing (a state-machine property, after each settled sequence) rather
// than only when the namespace's test ends.
func KstatusViolations(namespace string) []string {
	violations.Lock()
	defer violations.Unlock()
	v := violations.byNamespace[namespace]
	delete(violations.byNamespace, namespace)
	return v
}
