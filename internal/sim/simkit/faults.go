package simkit

import (
	"fmt"
	"net/http"
	"regexp"
	"sync"
)

// Rule is the part of an injected fault every simulator matches the same
// way. A request matches when every set criterion matches.
type Rule struct {
	// Method matches the HTTP method; empty matches any.
	Method string
	// Path is a regular expression matched against the request path (below
	// the API's prefix); empty matches any.
	Path string
	// Times is how many matching requests the fault applies to; 0 (or less)
	// means every one until Clear.
	Times int
}

// Faults is a simulator's queue of injected faults of its own type F. The
// first armed fault, in injection order, that matches a request applies and
// uses up one of its times. The zero value is not usable: see NewFaults.
type Faults[F any] struct {
	name string

	mu    sync.Mutex
	armed []*armedFault[F]
}

type armedFault[F any] struct {
	fault  F
	method string
	re     *regexp.Regexp
	remain int // -1: until Clear
}

// NewFaults returns an empty queue; name starts its errors.
func NewFaults[F any](name string) *Faults[F] {
	return &Faults[F]{name: name}
}

// Add arms fault f, matched by rule. It fails only on an invalid Path
// expression.
func (q *Faults[F]) Add(rule Rule, f F) error {
	a := &armedFault[F]{fault: f, method: rule.Method, remain: rule.Times}
	if rule.Times <= 0 {
		a.remain = -1
	}
	if rule.Path != "" {
		re, err := regexp.Compile(rule.Path)
		if err != nil {
			return fmt.Errorf("%s: fault path: %w", q.name, err)
		}
		a.re = re
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed = append(q.armed, a)
	return nil
}

// Clear removes every fault.
func (q *Faults[F]) Clear() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed = nil
}

// Pending reports how many faults are still armed.
func (q *Faults[F]) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.armed)
}

// Take returns the first fault whose rule matches method and path and for
// which also (when not nil) holds, the simulator's own criteria such as an
// operation name; it uses up one of that fault's times.
func (q *Faults[F]) Take(method, path string, also func(F) bool) (F, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, a := range q.armed {
		if (a.method != "" && a.method != method) || (a.re != nil && !a.re.MatchString(path)) ||
			(also != nil && !also(a.fault)) {
			continue
		}
		if a.remain > 0 {
			a.remain--
			if a.remain == 0 {
				q.armed = append(q.armed[:i:i], q.armed[i+1:]...)
			}
		}
		return a.fault, true
	}
	var none F
	return none, false
}

// DefaultError fills in an injected error answer's unset parts: status 500
// and the status's standard text as the message.
func DefaultError(status int, message string) (int, string) {
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if message == "" {
		message = http.StatusText(status)
	}
	return status, message
}
