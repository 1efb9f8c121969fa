package providers

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors every provider wraps, so reconcilers decide with errors.Is.
var (
	// ErrNotFound: the machine (or template, node) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNameTaken: the chosen name or VMID belongs to a machine this operator
	// does not own; choose another and record it before calling Create again.
	ErrNameTaken = errors.New("name or VMID taken by a machine HyperFleet does not own")
	// ErrNotOwned: the machine is not owned by the caller; it is never touched.
	ErrNotOwned = errors.New("machine is not owned by this object")
	// ErrInProgress: the operation was started and is still running; call again.
	ErrInProgress = errors.New("operation in progress")
	// ErrQueued: the request waits its turn (a clone slot on a node or
	// storage); expected under a burst, so callers wait RetryAfter without
	// escalating. Errors made by Queued match it.
	ErrQueued = errors.New("queued")
)

// TransientError is a failure that may clear by itself: the hypervisor is
// unreachable, busy, rate-limiting, or admission is queueing the request.
// After, if set, is how long to wait before retrying.
type TransientError struct {
	Reason string
	After  time.Duration
	Err    error
	// Queued marks a request waiting its turn: the error matches ErrQueued.
	Queued bool
}

func (e *TransientError) Error() string {
	if e.Err == nil {
		return e.Reason
	}
	return fmt.Sprintf("%s: %v", e.Reason, e.Err)
}

func (e *TransientError) Unwrap() error { return e.Err }

// Is matches ErrQueued for a queued request.
func (e *TransientError) Is(target error) bool { return e.Queued && target == ErrQueued }

// PermanentError is a failure that will not clear until a person changes
// something; Reason is a CamelCase condition reason and the message says what
// to change.
type PermanentError struct {
	Reason  string
	Message string
	Err     error
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return e.Message
	}
	return fmt.Sprintf("%s: %v", e.Message, e.Err)
}

func (e *PermanentError) Unwrap() error { return e.Err }

// Transient wraps err as a TransientError.
func Transient(reason string, after time.Duration, err error) error {
	return &TransientError{Reason: reason, After: after, Err: err}
}

// Queued returns a TransientError matching ErrQueued: the request waits its
// turn; after is when to ask again.
func Queued(reason string, after time.Duration, err error) error {
	return &TransientError{Reason: reason, After: after, Err: err, Queued: true}
}

// Permanent returns a PermanentError with a reason and an actionable message.
func Permanent(reason, message string, err error) error {
	return &PermanentError{Reason: reason, Message: message, Err: err}
}

// IsPermanent reports whether err is (or wraps) a PermanentError, and returns it.
func IsPermanent(err error) (*PermanentError, bool) {
	var p *PermanentError
	ok := errors.As(err, &p)
	return p, ok
}

// RetryAfter returns how long to wait before calling again after err: the
// hint of a transient error, or zero when err says nothing about it.
func RetryAfter(err error) time.Duration {
	var t *TransientError
	if errors.As(err, &t) {
		return t.After
	}
	return 0
}
