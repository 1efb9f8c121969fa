package github

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	gogithub "github.com/google/go-github/v60/github"

	"github.com/hyperfleet/hyperfleet/providers"
)

// ErrRunnerBusy: GitHub refused to delete a runner because it is running a
// job (422). Wait for the job to finish, then delete it again.
var ErrRunnerBusy = errors.New("runner is running a job")

// Transient reasons; permanent ones are named where they are made.
const (
	ReasonRateLimited  = "RateLimited"
	reasonUnavailable  = "GitHubUnavailable"
	reasonUnreachable  = "GitHubUnreachable"
	reasonGitHubError  = "GitHubError"
	unavailableBackoff = 15 * time.Second
)

// isNotFound reports whether err wraps providers.ErrNotFound.
func isNotFound(err error) bool { return errors.Is(err, providers.ErrNotFound) }

// classify turns what go-github (or a transport of ours) returned into the
// providers contract's errors. Messages carry GitHub's own message and the
// request's method and path, never a credential.
func (c *Client) classify(op string, scope Scope, err error) error {
	if err == nil {
		return nil
	}
	wrap := func(e error) error { return fmt.Errorf("%s for %s: %w", op, scope, e) }
	var (
		limited   *RateLimitedError
		permanent *providers.PermanentError
		transient *providers.TransientError
		primary   *gogithub.RateLimitError
		secondary *gogithub.AbuseRateLimitError
		resp      *gogithub.ErrorResponse
		netErr    net.Error
	)
	now := c.clock.Now()
	switch {
	case errors.As(err, &limited):
		return wrap(providers.Transient(ReasonRateLimited, limited.After, limited))
	case errors.As(err, &permanent), errors.As(err, &transient):
		return wrap(err) // already classified (an installation token could not be had)
	case errors.As(err, &primary):
		return wrap(providers.Transient(ReasonRateLimited, max(primary.Rate.Reset.Sub(now), time.Second),
			fmt.Errorf("GitHub: %s", primary.Message)))
	case errors.As(err, &secondary):
		after := DefaultSecondaryWait
		if secondary.RetryAfter != nil {
			after = *secondary.RetryAfter
		}
		return wrap(providers.Transient(ReasonRateLimited, after, fmt.Errorf("GitHub secondary rate limit: %s", secondary.Message)))
	case errors.As(err, &resp) && resp.Response != nil:
		return wrap(c.classifyStatus(op, scope, resp, now))
	case errors.Is(err, context.Canceled):
		return wrap(err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr):
		return wrap(providers.Transient(reasonUnreachable, unavailableBackoff, err))
	}
	return wrap(providers.Transient(reasonGitHubError, unavailableBackoff, err))
}

// classifyStatus classifies an answer GitHub gave with an error status.
func (c *Client) classifyStatus(op string, scope Scope, resp *gogithub.ErrorResponse, now time.Time) error {
	status := resp.Response.StatusCode
	ghErr := fmt.Errorf("GitHub answered %d: %s", status, resp.Message)
	if status == http.StatusForbidden || status == http.StatusTooManyRequests {
		body := []byte(resp.Message + " " + resp.DocumentationURL)
		if sig := parseRateLimit(status, resp.Response.Header, body, now, c.limiter.secondaryWait); sig.limited {
			return providers.Transient(ReasonRateLimited, sig.wait, ghErr)
		}
	}
	switch {
	case status == http.StatusUnauthorized:
		return providers.Permanent("AuthenticationFailed", c.authHint(), ghErr)
	case status == http.StatusForbidden:
		return providers.Permanent("PermissionDenied", c.permissionHint(scope), ghErr)
	case status == http.StatusNotFound:
		switch op {
		case opGetRunner, opDeleteRunner:
			return fmt.Errorf("%w: %w", providers.ErrNotFound, ghErr)
		}
		// GitHub answers 404, not 403, for a repository or organization the
		// credentials cannot see.
		return providers.Permanent("ScopeNotFound",
			fmt.Sprintf("GitHub has no %s visible to these credentials: check spec.github, and %s", scopeNoun(scope), c.visibilityHint(scope)), ghErr)
	case status == http.StatusUnprocessableEntity && op == opDeleteRunner:
		return fmt.Errorf("%w: %w", ErrRunnerBusy, ghErr)
	case status == http.StatusConflict && op == opGenerateJITConfig:
		return fmt.Errorf("%w: %w", providers.ErrNameTaken, ghErr)
	case status >= 500:
		after := unavailableBackoff
		if d, ok := parseRetryAfter(resp.Response.Header.Get("Retry-After"), now); ok {
			after = d
		}
		return providers.Transient(reasonUnavailable, after, ghErr)
	case status == http.StatusBadRequest, status == http.StatusUnprocessableEntity, status == http.StatusConflict:
		return providers.Permanent("RequestRejected", fmt.Sprintf("GitHub rejected %s for %s: %s", op, scope, resp.Message), nil)
	}
	return providers.Transient(reasonGitHubError, unavailableBackoff, ghErr)
}

func scopeNoun(scope Scope) string {
	if scope.IsRepository() {
		return "repository " + scope.path()
	}
	return "organization " + scope.path()
}

func (c *Client) authHint() string {
	if c.kind == AuthApp {
		return "GitHub refused the App installation's token: check appID, installationID and privateKey in the credentials Secret"
	}
	return "GitHub refused the token: it may be expired or revoked; put a valid token in the credentials Secret"
}

// permissionHint says which permission the App or token lacks for scope.
func (c *Client) permissionHint(scope Scope) string {
	switch {
	case c.kind == AuthApp && scope.IsRepository():
		return fmt.Sprintf("the GitHub App lacks permission to manage self-hosted runners of %s: grant it the repository permission \"Administration: Read and write\" and accept the new permission on the installation", scope)
	case c.kind == AuthApp:
		return fmt.Sprintf("the GitHub App lacks permission to manage self-hosted runners of %s: grant it the organization permission \"Self-hosted runners: Read and write\" and accept the new permission on the installation", scope)
	case scope.IsRepository():
		return fmt.Sprintf("the token lacks permission to manage self-hosted runners of %s: a classic token needs the \"repo\" scope, a fine-grained one the repository permission \"Administration: Read and write\", and its user must be an admin of the repository", scope)
	}
	return fmt.Sprintf("the token lacks permission to manage self-hosted runners of %s: a classic token needs the \"admin:org\" scope, a fine-grained one the organization permission \"Self-hosted runners: Read and write\", and its user must be an owner of the organization", scope)
}

func (c *Client) visibilityHint(scope Scope) string {
	if c.kind == AuthApp {
		return "that the GitHub App is installed on " + scopeNoun(scope)
	}
	return "that the token's user can see " + scopeNoun(scope)
}
