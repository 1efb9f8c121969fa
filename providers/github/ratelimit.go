package github

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

const (
	// DefaultReserve is the share of each hourly budget kept for essential
	// calls: deleting runners, minting the token that deletes need, and the
	// reads that decide a deletion (ForDeregistration).
	DefaultReserve = 0.05
	// DefaultSecondaryWait is how long a secondary rate limit without a
	// Retry-After header blocks calls; GitHub asks for at least a minute.
	DefaultSecondaryWait = time.Minute
	// maxWait caps any wait a header asks for, so a garbled header cannot stop
	// a Client for longer than GitHub's hourly window.
	maxWait = time.Hour
	// peekLimit bounds how much of a 403/429 body is read to recognise a
	// secondary rate limit.
	peekLimit = 64 << 10
)

// RateLimiter keeps the GitHub rate-limit budgets of every Client that shares
// it, one budget per credential (an App installation, the App itself, or a
// token) and GitHub host, because that is what GitHub charges. It is fed by
// the headers of every answer and consulted before every request: a request
// that would overdraw a budget, or that comes while a Retry-After is in force,
// is refused locally with a *RateLimitedError instead of being sent. It is
// safe for concurrent use.
type RateLimiter struct {
	clock         clock.PassiveClock
	reserve       float64
	secondaryWait time.Duration

	mu      sync.Mutex
	budgets map[string]*budget
}

// RateLimiterOptions tunes a RateLimiter; the zero value is the defaults.
type RateLimiterOptions struct {
	// Reserve is the share (0..1) of each budget only essential calls may
	// use; 0 means DefaultReserve, a negative value keeps no reserve.
	Reserve float64
	// SecondaryWait is how long a secondary rate limit without Retry-After
	// blocks calls; 0 means DefaultSecondaryWait.
	SecondaryWait time.Duration
	// Clock is the time source; nil is the real clock.
	Clock clock.PassiveClock
}

type budget struct {
	resource   string
	limit      int
	remaining  int
	reset      time.Time // when GitHub refills the budget
	retryUntil time.Time // a Retry-After or secondary limit in force
}

// BudgetStatus is a snapshot of one budget, for tests and diagnostics.
type BudgetStatus struct {
	// Key names the credential and host, e.g.
	// "https://api.github.com/ installation:42"; tokens appear as a hash.
	Key        string
	Resource   string
	Limit      int
	Remaining  int
	Reset      time.Time
	RetryUntil time.Time
}

// NewRateLimiter returns an empty RateLimiter: every budget is unknown (and
// calls go out) until GitHub's first answer describes it.
func NewRateLimiter(opts RateLimiterOptions) *RateLimiter {
	registerMetrics()
	l := &RateLimiter{clock: opts.Clock, reserve: opts.Reserve, secondaryWait: opts.SecondaryWait, budgets: map[string]*budget{}}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	switch {
	case l.reserve == 0:
		l.reserve = DefaultReserve
	case l.reserve < 0:
		l.reserve = 0
	case l.reserve > 1:
		l.reserve = 1
	}
	if l.secondaryWait <= 0 {
		l.secondaryWait = DefaultSecondaryWait
	}
	return l
}

var (
	defaultLimiterOnce sync.Once
	defaultLimiter     *RateLimiter
)

// DefaultRateLimiter is the process-wide RateLimiter every Client uses unless
// its Config names another.
func DefaultRateLimiter() *RateLimiter {
	defaultLimiterOnce.Do(func() { defaultLimiter = NewRateLimiter(RateLimiterOptions{}) })
	return defaultLimiter
}

// RateLimitedError is why a call was not sent: the budget is spent (or only
// its reserve is left and the call is not essential), or GitHub asked to wait.
// Calls wrap it in a providers.TransientError with Reason "RateLimited".
type RateLimitedError struct {
	// After is how long until a call may go out again.
	After time.Duration
	// Why says which limit applies, for people.
	Why string
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("GitHub rate limit: %s; not sending for %s", e.Why, e.After.Round(time.Second))
}

// Budgets returns a snapshot of every budget, sorted by key.
func (l *RateLimiter) Budgets() []BudgetStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]BudgetStatus, 0, len(l.budgets))
	for k, b := range l.budgets {
		out = append(out, BudgetStatus{Key: k, Resource: b.resource, Limit: b.limit, Remaining: b.remaining, Reset: b.reset, RetryUntil: b.retryUntil})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// admit decides whether a request charged to key may go out now, and counts
// it against the budget when it may. Essential requests may use the reserve.
func (l *RateLimiter) admit(key string, essential bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.budgets[key]
	if b == nil {
		return nil
	}
	now := l.clock.Now()
	if now.Before(b.retryUntil) {
		return &RateLimitedError{After: b.retryUntil.Sub(now), Why: "GitHub asked to retry later"}
	}
	if b.limit <= 0 || !now.Before(b.reset) {
		return nil // unknown, or the window has reset: the next answer tells
	}
	if b.remaining <= 0 {
		return &RateLimitedError{After: b.reset.Sub(now), Why: fmt.Sprintf("the hourly budget of %d requests is spent", b.limit)}
	}
	if reserved := l.reserved(b.limit); !essential && b.remaining <= reserved {
		return &RateLimitedError{After: b.reset.Sub(now),
			Why: fmt.Sprintf("only the %d requests kept for deleting runners are left of the hourly budget of %d", reserved, b.limit)}
	}
	b.remaining--
	return nil
}

// reserved is how many requests of a budget of limit only essential calls use.
func (l *RateLimiter) reserved(limit int) int {
	return int(math.Ceil(float64(limit) * l.reserve))
}

// observe updates key's budget from an answer's status, headers and (for
// 403 and 429) the start of its body.
func (l *RateLimiter) observe(key string, status int, h http.Header, body []byte) {
	now := l.clock.Now()
	sig := parseRateLimit(status, h, body, now, l.secondaryWait)
	if !sig.hasBudget && !sig.limited {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.budgets[key]
	if b == nil {
		b = &budget{resource: "core"}
		l.budgets[key] = b
	}
	if sig.hasBudget {
		if sig.resource != "" {
			b.resource = sig.resource
		}
		// Within one window, keep the lower count: answers to requests sent
		// concurrently may arrive out of order, and requests still in flight
		// were already counted by admit.
		if b.limit == sig.limit && b.reset.Equal(sig.reset) {
			b.remaining = min(b.remaining, sig.remaining)
		} else {
			b.limit, b.remaining, b.reset = sig.limit, sig.remaining, sig.reset
		}
	}
	if sig.limited {
		if until := now.Add(sig.wait); until.After(b.retryUntil) {
			b.retryUntil = until
		}
	}
	l.updateGauge(b.resource, now)
}

// updateGauge sets the remaining-budget gauge of resource to the lowest
// remaining count among budgets whose window is still open, which is the one
// about to stop calls. The caller holds l.mu.
func (l *RateLimiter) updateGauge(resource string, now time.Time) {
	lowest := -1
	for _, b := range l.budgets {
		if b.resource != resource || b.limit <= 0 || !now.Before(b.reset) {
			continue
		}
		if lowest < 0 || b.remaining < lowest {
			lowest = b.remaining
		}
	}
	if lowest >= 0 {
		rateLimitRemaining.WithLabelValues(resource).Set(float64(lowest))
	}
}

// rateSignal is what one answer says about rate limits.
type rateSignal struct {
	// hasBudget: the X-RateLimit-* headers described the credential's budget.
	hasBudget        bool
	limit, remaining int
	reset            time.Time
	resource         string
	// limited: the answer refused the request for rate; wait before the next.
	limited   bool
	secondary bool
	wait      time.Duration
}

// parseRateLimit reads an answer's rate-limit headers and, for a refusal,
// how long to wait:
//   - Retry-After (seconds or an HTTP date) when present;
//   - else, with the budget spent (X-RateLimit-Remaining: 0), until X-RateLimit-Reset;
//   - else, for a secondary rate limit or a 429, secondaryWait (GitHub: "at least one minute").
//
// A 401's headers describe the caller's IP address, not the credential, and
// are ignored. Malformed headers are ignored; waits are capped at an hour.
func parseRateLimit(status int, h http.Header, body []byte, now time.Time, secondaryWait time.Duration) rateSignal {
	var sig rateSignal
	if status == http.StatusUnauthorized {
		return sig
	}
	limit, okL := headerInt(h, "X-RateLimit-Limit")
	remaining, okR := headerInt(h, "X-RateLimit-Remaining")
	reset, okT := headerInt(h, "X-RateLimit-Reset")
	if okL && okR && okT && limit > 0 {
		sig.hasBudget = true
		sig.limit, sig.remaining = limit, min(remaining, limit)
		resetAt := time.Unix(int64(reset), 0)
		if resetAt.After(now.Add(maxWait)) {
			resetAt = now.Add(maxWait)
		}
		sig.reset = resetAt
		sig.resource = strings.ToLower(strings.TrimSpace(h.Get("X-RateLimit-Resource")))
		if !validResource(sig.resource) {
			sig.resource = "" // it becomes a metric label: keep it to a short word
		}
	}
	if status != http.StatusForbidden && status != http.StatusTooManyRequests {
		return sig
	}
	retryAfter, hasRetryAfter := parseRetryAfter(h.Get("Retry-After"), now)
	sig.secondary = isSecondaryLimit(body)
	spent := sig.hasBudget && sig.remaining == 0
	if status == http.StatusForbidden && !hasRetryAfter && !spent && !sig.secondary {
		return sig // a permission refusal, not a rate limit
	}
	sig.limited = true
	switch {
	case hasRetryAfter:
		sig.wait = retryAfter
	case spent:
		sig.wait = max(sig.reset.Sub(now), time.Second)
	default:
		sig.wait = secondaryWait
	}
	sig.wait = min(sig.wait, maxWait)
	return sig
}

func validResource(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// headerInt parses a non-negative decimal header value.
func headerInt(h http.Header, name string) (int, bool) {
	v := strings.TrimSpace(h.Get(name))
	if v == "" || len(v) > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return 0, false
	}
	return int(n), true
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP date
// (RFC 9110 §10.2.3); GitHub sends seconds.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(maxWait/time.Second) {
			return maxWait, true
		}
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := t.Sub(now)
		return min(max(d, 0), maxWait), true
	}
	return 0, false
}

// isSecondaryLimit recognises GitHub's secondary (formerly "abuse") rate
// limit answers by their message or documentation URL.
func isSecondaryLimit(body []byte) bool {
	lower := bytes.ToLower(body)
	return bytes.Contains(lower, []byte("secondary rate limit")) ||
		bytes.Contains(lower, []byte("abuse detection")) ||
		bytes.Contains(lower, []byte("#abuse-rate-limits"))
}

// limitTransport consults the RateLimiter before sending and feeds it every
// answer.
type limitTransport struct {
	limiter *RateLimiter
	key     string
	base    http.RoundTripper
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := operation(req)
	if err := t.limiter.admit(t.key, isEssential(op) || IsForDeregistration(req.Context())); err != nil {
		throttled.WithLabelValues(op).Inc()
		closeBody(req)
		return nil, err
	}
	res, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	var body []byte
	if res.StatusCode == http.StatusForbidden || res.StatusCode == http.StatusTooManyRequests {
		body, res.Body = peekBody(res.Body)
	}
	t.limiter.observe(t.key, res.StatusCode, res.Header, body)
	return res, nil
}

// closeBody honours the RoundTripper contract (the request body is closed
// even when the request is not sent).
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// peekBody reads up to peekLimit bytes of body and returns them with a
// reader that still yields the whole body.
func peekBody(body io.ReadCloser) ([]byte, io.ReadCloser) {
	head, err := io.ReadAll(io.LimitReader(body, peekLimit))
	if err != nil {
		head = nil
	}
	return head, struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), body), body}
}

// isEssential reports whether an operation may always use the reserve:
// deleting runners must go out even when scale-ups spent the budget, and so
// must the installation token deleting needs. The reads before a delete
// may use it too, when their context says so (ForDeregistration).
func isEssential(op string) bool {
	return op == opDeleteRunner || op == opCreateInstallationToken
}
