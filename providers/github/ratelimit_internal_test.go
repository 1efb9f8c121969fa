package github

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestParseRateLimit(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	reset := strconv.FormatInt(now.Add(30*time.Minute).Unix(), 10)
	budget := func(remaining string) []string {
		return []string{"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", remaining, "X-RateLimit-Reset", reset, "X-RateLimit-Resource", "core"}
	}
	cases := []struct {
		name      string
		status    int
		h         http.Header
		body      string
		hasBudget bool
		remaining int
		limited   bool
		wait      time.Duration
	}{
		{"ok answer", 200, headers(budget("4990")...), "", true, 4990, false, 0},
		{"no headers", 200, headers(), "", false, 0, false, 0},
		{"401 headers are the IP's", 401, headers(budget("59")...), "", false, 0, false, 0},
		{"429 Retry-After", 429, headers(append(budget("4000"), "Retry-After", "17")...), "", true, 4000, true, 17 * time.Second},
		{"429 without anything", 429, headers(), "", false, 0, true, time.Minute},
		{"403 Retry-After", 403, headers("Retry-After", "3"), "", false, 0, true, 3 * time.Second},
		{"403 budget spent", 403, headers(budget("0")...), `{"message":"API rate limit exceeded"}`, true, 0, true, 30 * time.Minute},
		{"403 secondary, no header", 403, headers(budget("4000")...), `{"message":"You have exceeded a secondary rate limit."}`, true, 4000, true, time.Minute},
		{"403 abuse doc URL", 403, headers(), `{"documentation_url":"https://docs.github.com/rest#abuse-rate-limits"}`, false, 0, true, time.Minute},
		{"403 permission", 403, headers(budget("4000")...), `{"message":"Resource not accessible by integration"}`, true, 4000, false, 0},
		{"Retry-After as a date", 429, headers("Retry-After", now.Add(90*time.Second).UTC().Format(http.TimeFormat)), "", false, 0, true, 90 * time.Second},
		{"huge Retry-After is capped", 429, headers("Retry-After", "999999999999"), "", false, 0, true, time.Hour},
		{"negative Retry-After ignored", 429, headers("Retry-After", "-5"), "", false, 0, true, time.Minute},
		{"garbage headers ignored", 200, headers("X-RateLimit-Limit", "lots", "X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1"), "", false, 0, false, 0},
		{"remaining above limit clamps", 200, headers("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "50", "X-RateLimit-Reset", reset), "", true, 10, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sig := parseRateLimit(tc.status, tc.h, []byte(tc.body), now, DefaultSecondaryWait)
			if sig.hasBudget != tc.hasBudget || (tc.hasBudget && sig.remaining != tc.remaining) || sig.limited != tc.limited || sig.wait != tc.wait {
				t.Fatalf("got %+v", sig)
			}
		})
	}
}

func FuzzParseRateLimit(f *testing.F) {
	f.Add(403, "5000", "0", "1700001800", "core", "", "API rate limit exceeded")
	f.Add(429, "", "", "", "", "60", "")
	f.Add(403, "60", "59", "99999999999999", "search", "Wed, 21 Oct 2015 07:28:00 GMT", "secondary rate limit")
	f.Add(200, "-1", "-1", "-1", "CORE\n", "-1", "")
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, status int, limit, remaining, reset, resource, retryAfter, body string) {
		h := headers("X-RateLimit-Limit", limit, "X-RateLimit-Remaining", remaining, "X-RateLimit-Reset", reset,
			"X-RateLimit-Resource", resource, "Retry-After", retryAfter)
		sig := parseRateLimit(status, h, []byte(body), now, DefaultSecondaryWait)
		if sig.wait < 0 || sig.wait > maxWait {
			t.Fatalf("wait %s out of [0, %s]", sig.wait, maxWait)
		}
		if sig.hasBudget && (sig.limit <= 0 || sig.remaining < 0 || sig.remaining > sig.limit || sig.reset.After(now.Add(maxWait))) {
			t.Fatalf("budget out of range: %+v", sig)
		}
		if sig.resource != "" && !validResource(sig.resource) {
			t.Fatalf("resource %q would become a metric label", sig.resource)
		}
		if sig.limited && status != http.StatusForbidden && status != http.StatusTooManyRequests {
			t.Fatalf("status %d marked as rate-limited", status)
		}
		// Whatever the headers say, a limiter fed with them stays usable.
		l := NewRateLimiter(RateLimiterOptions{Clock: clocktesting.NewFakePassiveClock(now)})
		l.observe("k", status, h, []byte(body))
		var rl *RateLimitedError
		if err := l.admit("k", true); err != nil && (!errors.As(err, &rl) || rl.After < 0 || rl.After > maxWait) {
			t.Fatalf("admit = %v", err)
		}
	})
}

func TestRateLimiterReserveAndWindows(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(now)
	l := NewRateLimiter(RateLimiterOptions{Clock: clk, Reserve: 0.1})
	if err := l.admit("k", false); err != nil {
		t.Fatalf("an unknown budget must let calls out: %v", err)
	}
	reset := strconv.FormatInt(now.Add(10*time.Minute).Unix(), 10)
	l.observe("k", 200, headers("X-RateLimit-Limit", "20", "X-RateLimit-Remaining", "5", "X-RateLimit-Reset", reset), nil)
	// Reserve: ceil(20 × 0.1) = 2. Non-essential calls may take remaining 5, 4, 3.
	for i := range 3 {
		if err := l.admit("k", false); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := l.admit("k", false)
	var rl *RateLimitedError
	if !errors.As(err, &rl) || rl.After != 10*time.Minute {
		t.Fatalf("into the reserve: %v", err)
	}
	// An answer to an earlier request, arriving late, does not give back
	// what calls still in flight took.
	l.observe("k", 200, headers("X-RateLimit-Limit", "20", "X-RateLimit-Remaining", "4", "X-RateLimit-Reset", reset), nil)
	if b := l.Budgets()[0]; b.Remaining != 2 {
		t.Fatalf("remaining = %d, want 2", b.Remaining)
	}
	for i := range 2 {
		if err := l.admit("k", true); err != nil {
			t.Fatalf("essential call %d: %v", i, err)
		}
	}
	if err := l.admit("k", true); !errors.As(err, &rl) {
		t.Fatalf("a spent budget must stop essential calls too: %v", err)
	}
	if err := l.admit("other", false); err != nil {
		t.Fatalf("another credential's budget is separate: %v", err)
	}
	clk.SetTime(now.Add(10 * time.Minute))
	if err := l.admit("k", false); err != nil {
		t.Fatalf("after the window reset: %v", err)
	}
	// A new window from the headers replaces the old one.
	next := strconv.FormatInt(now.Add(70*time.Minute).Unix(), 10)
	l.observe("k", 200, headers("X-RateLimit-Limit", "20", "X-RateLimit-Remaining", "19", "X-RateLimit-Reset", next), nil)
	if b := l.Budgets()[0]; b.Remaining != 19 {
		t.Fatalf("remaining in the new window = %d", b.Remaining)
	}
}

func TestOperationNames(t *testing.T) {
	cases := []struct{ method, path, want string }{
		{"POST", "/app/installations/42/access_tokens", opCreateInstallationToken},
		{"POST", "/api/v3/repos/o/r/actions/runners/registration-token", opCreateRegistrationToken},
		{"POST", "/orgs/o/actions/runners/registration-token", opCreateRegistrationToken},
		{"POST", "/orgs/o/actions/runners/remove-token", opCreateRemoveToken},
		{"POST", "/repos/o/r/actions/runners/generate-jitconfig", opGenerateJITConfig},
		{"GET", "/orgs/o/actions/runners", opListRunners},
		{"GET", "/repos/o/r/actions/runners/7", opGetRunner},
		{"DELETE", "/ghe/api/v3/orgs/o/actions/runners/7", opDeleteRunner},
		{"GET", "/orgs/o/actions/runner-groups", opListRunnerGroups},
		{"GET", "/user", opOther},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, "https://example.com"+tc.path, nil)
		if got := operation(req); got != tc.want {
			t.Errorf("%s %s = %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestWebURL(t *testing.T) {
	cases := map[string]string{
		"":                                "https://github.com/",
		"https://api.github.com/":         "https://github.com/",
		"https://ghe.example.com/api/v3/": "https://ghe.example.com/",
		"https://ghe.example.com":         "https://ghe.example.com/",
		"https://example.com/ghe/api/v3":  "https://example.com/ghe/",
		"https://api.acme.ghe.com/":       "https://acme.ghe.com/",
		"http://127.0.0.1:8080/api/v3/":   "http://127.0.0.1:8080/",
	}
	for base, want := range cases {
		c, err := New(Config{BaseURL: base, Token: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.RunnerURL(Scope{Organization: "acme"}); got != want+"acme" {
			t.Errorf("BaseURL %q: RunnerURL = %q, want %q", base, got, want+"acme")
		}
	}
}
