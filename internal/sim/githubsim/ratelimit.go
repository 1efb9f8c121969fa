package githubsim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// simBudget is one credential's primary rate limit in the current window.
type simBudget struct {
	used  int
	reset time.Time
}

// unauthenticatedLimit is GitHub's budget for requests without valid credentials.
const unauthenticatedLimit = 60

// chargeLocked counts a request against id's budget and sets the
// X-RateLimit-* headers; when the budget is spent it refuses the request as
// GitHub does (403, remaining 0). The caller holds s.mu.
func (s *Server) chargeLocked(id identity, h http.Header) *apiError {
	now := s.clock.Now()
	b := s.budgets[id.key]
	if b == nil || !now.Before(b.reset) {
		// Whole seconds, as X-RateLimit-Reset can only say whole seconds.
		b = &simBudget{reset: now.Add(s.opts.RateLimitWindow).Truncate(time.Second)}
		s.budgets[id.key] = b
	}
	limit := s.rateLimit
	if b.used >= limit {
		setRateHeaders(h, limit, b.used, b.reset)
		who := "installation ID " + strconv.FormatInt(s.opts.InstallationID, 10)
		switch id.kind {
		case "token":
			who = "user ID 1"
		case "app":
			who = "integration ID " + strconv.FormatInt(s.opts.AppID, 10)
		}
		return &apiError{status: http.StatusForbidden,
			message: fmt.Sprintf("API rate limit exceeded for %s. If you reach out to GitHub Support for help, please include the request ID %s.", who, requestID()),
			docURL:  "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-primary-rate-limits",
			header:  h}
	}
	b.used++
	setRateHeaders(h, limit, b.used, b.reset)
	return nil
}

func setRateHeaders(h http.Header, limit, used int, reset time.Time) {
	h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(limit-used, 0)))
	h.Set("X-RateLimit-Used", strconv.Itoa(used))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
}

func unauthenticatedRateHeaders(now time.Time) http.Header {
	h := http.Header{}
	setRateHeaders(h, unauthenticatedLimit, 1, now.Add(time.Hour))
	return h
}

func requestID() string {
	return strings.ToUpper(randomAlnum(4, "0123456789abcdef") + ":" + randomAlnum(6, "0123456789abcdef") + ":" + randomAlnum(7, "0123456789abcdef"))
}

// SetRateLimit changes every credential's budget per window (it applies to
// the current window too).
func (s *Server) SetRateLimit(limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateLimit = max(limit, 0)
}

// SetRateUsed sets how many requests of the current window every credential
// has used so far, e.g. to start a test close to exhaustion.
func (s *Server) SetRateUsed(used int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, key := range []string{
		"installation:" + strconv.FormatInt(s.opts.InstallationID, 10),
		"app:" + strconv.FormatInt(s.opts.AppID, 10),
	} {
		if b := s.budgets[key]; b == nil || !now.Before(b.reset) {
			s.budgets[key] = &simBudget{reset: now.Add(s.opts.RateLimitWindow).Truncate(time.Second)}
		}
	}
	for pat := range s.pats {
		key := patBudgetKey(pat)
		if b := s.budgets[key]; b == nil || !now.Before(b.reset) {
			s.budgets[key] = &simBudget{reset: now.Add(s.opts.RateLimitWindow).Truncate(time.Second)}
		}
	}
	for _, b := range s.budgets {
		b.used = max(used, 0)
	}
}

// RateRemaining reports each budget's remaining requests in its current
// window, keyed "installation:ID", "app:ID" or "token:HASH".
func (s *Server) RateRemaining() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	out := map[string]int{}
	for k, b := range s.budgets {
		if now.Before(b.reset) {
			out[k] = max(s.rateLimit-b.used, 0)
		} else {
			out[k] = s.rateLimit
		}
	}
	return out
}
