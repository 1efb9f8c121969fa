package simkit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// fault stands for a simulator's own Fault type: the queue only carries it.
type fault struct {
	name string
	op   string
}

func add(t *testing.T, q *simkit.Faults[fault], rule simkit.Rule, f fault) {
	t.Helper()
	if err := q.Add(rule, f); err != nil {
		t.Fatal(err)
	}
}

func take(q *simkit.Faults[fault], method, path string) string {
	f, ok := q.Take(method, path, nil)
	if !ok {
		return ""
	}
	return f.name
}

func TestFaultsMatchMethodAndPathInInjectionOrder(t *testing.T) {
	q := simkit.NewFaults[fault]("testsim")
	add(t, q, simkit.Rule{Method: http.MethodPost, Path: `/clone$`}, fault{name: "post-clone"})
	add(t, q, simkit.Rule{Path: `^/nodes`}, fault{name: "nodes"})
	add(t, q, simkit.Rule{}, fault{name: "any"})

	for _, tc := range []struct{ method, path, want string }{
		{http.MethodPost, "/nodes/pve1/qemu/100/clone", "post-clone"},
		{http.MethodGet, "/nodes/pve1/qemu/100/clone", "nodes"},
		{http.MethodGet, "/version", "any"},
		{http.MethodDelete, "/cluster/clone", "any"},
	} {
		if got := take(q, tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s took %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
	if n := q.Pending(); n != 3 {
		t.Errorf("Pending = %d, want 3: a fault without Times stays armed", n)
	}
}

func TestFaultsTimesAreUsedUp(t *testing.T) {
	q := simkit.NewFaults[fault]("testsim")
	add(t, q, simkit.Rule{Times: 2}, fault{name: "twice"})
	add(t, q, simkit.Rule{Times: 1}, fault{name: "once"})

	var got []string
	for range 4 {
		got = append(got, take(q, http.MethodGet, "/"))
	}
	if want := "twice,twice,once,"; strings.Join(got, ",") != want {
		t.Errorf("took %q, want %q", strings.Join(got, ","), want)
	}
	if n := q.Pending(); n != 0 {
		t.Errorf("Pending = %d after every fault was used up", n)
	}
}

func TestFaultsSimulatorCriteria(t *testing.T) {
	q := simkit.NewFaults[fault]("testsim")
	add(t, q, simkit.Rule{Times: 1}, fault{name: "clone only", op: "clone"})
	add(t, q, simkit.Rule{Times: 1}, fault{name: "other"})
	byOp := func(op string) func(fault) bool {
		return func(f fault) bool { return f.op == "" || f.op == op }
	}

	if f, _ := q.Take(http.MethodGet, "/version", byOp("version")); f.name != "other" {
		t.Errorf("a version request took %q, want the fault without an operation", f.name)
	}
	if f, _ := q.Take(http.MethodPost, "/clone", byOp("clone")); f.name != "clone only" {
		t.Errorf("a clone request took %q", f.name)
	}
	if _, ok := q.Take(http.MethodPost, "/clone", byOp("clone")); ok {
		t.Error("a fault applied after every one was used up")
	}
}

func TestFaultsClearAndInvalidPath(t *testing.T) {
	q := simkit.NewFaults[fault]("testsim")
	add(t, q, simkit.Rule{}, fault{name: "a"})
	add(t, q, simkit.Rule{Times: 3}, fault{name: "b"})
	q.Clear()
	if n := q.Pending(); n != 0 {
		t.Errorf("Pending = %d after Clear", n)
	}
	if got := take(q, http.MethodGet, "/"); got != "" {
		t.Errorf("took %q after Clear", got)
	}

	err := q.Add(simkit.Rule{Path: "("}, fault{name: "bad"})
	if err == nil || !strings.HasPrefix(err.Error(), "testsim: fault path: ") {
		t.Fatalf("Add with an invalid path: %v", err)
	}
	if n := q.Pending(); n != 0 {
		t.Errorf("an invalid fault was armed (Pending = %d)", n)
	}
}

func TestDefaultError(t *testing.T) {
	for _, tc := range []struct {
		status     int
		message    string
		wantStatus int
		wantMsg    string
	}{
		{0, "", http.StatusInternalServerError, "Internal Server Error"},
		{http.StatusTooManyRequests, "", http.StatusTooManyRequests, "Too Many Requests"},
		{http.StatusBadGateway, "upstream gone", http.StatusBadGateway, "upstream gone"},
		{0, "boom", http.StatusInternalServerError, "boom"},
	} {
		status, msg := simkit.DefaultError(tc.status, tc.message)
		if status != tc.wantStatus || msg != tc.wantMsg {
			t.Errorf("DefaultError(%d, %q) = %d, %q; want %d, %q", tc.status, tc.message, status, msg, tc.wantStatus, tc.wantMsg)
		}
	}
}
