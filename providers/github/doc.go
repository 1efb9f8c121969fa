// Package github is the GitHub Actions provider: it registers, lists and
// removes self-hosted runners through github.com/google/go-github/v60, on
// github.com or GitHub Enterprise Server, authenticated as a GitHub App
// installation or with a personal access token.
//
// A Client is built from a plain Config (ConfigFromSecret reads one from a
// Secret's data) and never touches a custom resource. Its Fingerprint lets a
// caller keep one Client per set of credentials and build a new one when the
// Secret behind it changes; Clients is such a cache, keyed by holder (a pool).
//
// JobEvent is the demand GitHub reports for one workflow job, in one shape
// whichever way it arrived: a workflow_job webhook delivery (the receiver in
// providers/github/webhook parses one) or a poll of a repository's queued
// jobs (ActiveJobs, then ListedJob.Event; GetJob to confirm one), the fallback for lost deliveries.
//
// Every Client of the process shares one RateLimiter (DefaultRateLimiter
// unless Config says otherwise). It learns each credential's budget from the
// X-RateLimit-* headers of every answer and honours Retry-After and secondary
// rate limits. While a budget is spent or a retry-after is in force, calls
// fail at once with a providers.TransientError whose Reason is "RateLimited"
// and whose After says when to call again: nothing is sent, and nothing
// sleeps. The last few percent of each budget are kept for deleting runners,
// so deregistration still goes out when scale-ups have used up the rest.
//
// Errors follow the providers contract: a runner that is gone wraps
// providers.ErrNotFound (DeleteRunner of a gone runner succeeds), a runner
// still running a job wraps ErrRunnerBusy, refused credentials and missing
// permissions are providers.PermanentError whose message names the permission
// to grant, and 5xx answers or network failures are transient. No error or log
// line carries a private key, token, registration token or JIT config.
//
// Metrics (registered once on controller-runtime's registry):
//
//	hyperfleet_github_api_requests_total{operation,code}   requests sent; code is the HTTP status or "error"
//	hyperfleet_github_api_request_duration_seconds{operation}
//	hyperfleet_github_requests_throttled_total{operation}  calls refused locally by the RateLimiter, never sent
//	hyperfleet_github_rate_limit_remaining{resource}       lowest remaining budget among the credentials seen,
//	                                                       per X-RateLimit-Resource ("core", ...)
package github
