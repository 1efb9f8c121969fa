package githubsim

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// FaultAction is what an injected fault does to a matching request.
type FaultAction int

const (
	// FaultHTTPError answers Status (default 500) with Message in GitHub's
	// JSON error shape, and a Retry-After header when RetryAfter is set: a
	// 5xx, or a 429 Too Many Requests with Retry-After.
	FaultHTTPError FaultAction = iota
	// FaultSecondaryRateLimit answers 403 (or Status) "You have exceeded a
	// secondary rate limit", with Retry-After only when RetryAfter is set,
	// as GitHub does.
	FaultSecondaryRateLimit
	// FaultDelay holds the answer for Delay, then serves the request.
	FaultDelay
	// FaultHang never answers: the request is held until the client gives up
	// or the server closes.
	FaultHang
	// FaultStartJob serves the request, but first queues Job and gives it
	// to the runner the request names (GET or DELETE
	// .../actions/runners/{runner_id}) when that runner is online, idle and
	// has the job's labels: the runner takes a job exactly between a
	// client's last look at it and this call, as on GitHub a runner may at
	// any moment.
	FaultStartJob
	// FaultDrop closes the connection without an answer, as a network
	// that drops it midway: the client sees the connection reset.
	FaultDrop
)

func (a FaultAction) String() string {
	switch a {
	case FaultHTTPError:
		return "http-error"
	case FaultSecondaryRateLimit:
		return "secondary-rate-limit"
	case FaultDelay:
		return "delay"
	case FaultHang:
		return "hang"
	case FaultStartJob:
		return "start-job"
	case FaultDrop:
		return "drop"
	}
	return fmt.Sprintf("FaultAction(%d)", int(a))
}

// Fault describes an injected failure. A request matches when every set
// criterion matches; the first matching fault, in injection order, applies.
// Faults act before authentication and the rate-limit budget, like a proxy
// in front of the API, so a faulted request costs no budget.
type Fault struct {
	// Method matches the HTTP method; empty matches any.
	Method string
	// Path is a regular expression matched against the path below an
	// Enterprise Server's /api/v3; empty matches any.
	Path string
	// Endpoint matches one of the Endpoint constants; empty matches any.
	Endpoint string
	// Times is how many matching requests the fault applies to; 0 means
	// every one until ClearFaults.
	Times int
	// Action is what the fault does.
	Action FaultAction
	// Status for FaultHTTPError (default 500) and FaultSecondaryRateLimit (default 403).
	Status int
	// Message overrides the error message.
	Message string
	// RetryAfter, when positive, is sent as Retry-After (whole seconds, rounded up).
	RetryAfter time.Duration
	// Delay is how long FaultDelay holds the answer.
	Delay time.Duration
	// Job is what FaultStartJob queues (Repo and Labels required).
	Job JobSpec
}

// InjectFault adds a fault; it fails only on an invalid Path expression.
func (s *Server) InjectFault(f Fault) error {
	return s.faults.Add(simkit.Rule{Method: f.Method, Path: f.Path, Times: f.Times}, f)
}

// ClearFaults removes every injected fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// PendingFaults reports how many injected faults are still armed.
func (s *Server) PendingFaults() int { return s.faults.Pending() }

// takeFault returns the first fault matching the request and uses one of
// its times.
func (s *Server) takeFault(method, path, endpoint string) (Fault, bool) {
	return s.faults.Take(method, path, func(f Fault) bool { return f.Endpoint == "" || f.Endpoint == endpoint })
}

// secondaryLimitDoc is where GitHub's secondary-limit answers point; go-github
// recognises a secondary limit by this URL's suffix.
const secondaryLimitDoc = "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"

// applyFault acts out f; it reports whether the request was answered (or
// abandoned) so the handler must not run.
func (s *Server) applyFault(w http.ResponseWriter, r *http.Request, f Fault) bool {
	switch f.Action {
	case FaultDelay:
		return !s.kit.Sleep(r.Context(), f.Delay)
	case FaultHang:
		s.kit.Hang(r.Context())
		return true
	case FaultStartJob:
		s.startJobOnRequest(r, f.Job)
		return false
	case FaultDrop:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return true
		}
		// A writer that cannot be hijacked (HTTP/2) answers as a proxy
		// whose upstream dropped the connection.
		writeError(w, &apiError{status: http.StatusBadGateway, message: "connection dropped"})
		return true
	case FaultSecondaryRateLimit:
		e := &apiError{status: f.Status, message: f.Message, docURL: secondaryLimitDoc, retryAfter: f.RetryAfter}
		if e.status == 0 {
			e.status = http.StatusForbidden
		}
		if e.message == "" {
			e.message = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID " + requestID() + "."
		}
		writeError(w, e)
		return true
	default:
		e := &apiError{retryAfter: f.RetryAfter}
		e.status, e.message = simkit.DefaultError(f.Status, f.Message)
		writeError(w, e)
		return true
	}
}

// startJobOnRequest queues spec and starts it on the runner the request
// names, if that runner can take it; otherwise the job waits in the queue
// for any runner, as a queued job does.
func (s *Server) startJobOnRequest(r *http.Request, spec JobSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	jobs, err := s.queueRunLocked(spec)
	if err != nil {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("runner_id"), 10, 64)
	if rn := s.runners[id]; err == nil && rn != nil && rn.online && !rn.busy && covers(rn, jobs[0]) {
		s.startJobLocked(jobs[0], rn)
	}
	s.dispatchLocked()
}
