package github

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	gogithub "github.com/google/go-github/v60/github"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/providers"
)

const (
	// tokenRefreshMargin: an installation token is replaced when less than
	// this is left of it, so no request goes out with a token about to expire.
	tokenRefreshMargin = 5 * time.Minute
	// jwtBackdate and jwtLifetime follow GitHub's advice: iat a minute in the
	// past against clock drift, exp under the ten-minute maximum.
	jwtBackdate = 60 * time.Second
	jwtLifetime = 9 * time.Minute
)

// tokenSource gives the token a request is authenticated with.
type tokenSource interface {
	// token returns a token and whether it was minted by this very call.
	token(ctx context.Context) (tok string, fresh bool, err error)
	// invalidate forgets tok after GitHub refused it.
	invalidate(tok string)
}

// staticToken is a personal access token.
type staticToken string

func (t staticToken) token(context.Context) (string, bool, error) { return string(t), false, nil }
func (staticToken) invalidate(string)                             {}

// installationTokens mints GitHub App installation tokens with the App's JWT
// and reuses each until it nears expiry.
type installationTokens struct {
	installationID int64
	apps           *gogithub.Client // authenticated with the App's JWT
	clock          clock.PassiveClock

	mu      sync.Mutex
	tok     string
	expires time.Time
}

func (s *installationTokens) token(ctx context.Context) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if s.tok != "" && now.Add(tokenRefreshMargin).Before(s.expires) {
		return s.tok, false, nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Minting a GitHub App installation token", "installationID", s.installationID, "previousExpiry", s.expires)
	it, _, err := s.apps.Apps.CreateInstallationToken(ctx, s.installationID, nil)
	if err != nil {
		return "", false, s.classify(err)
	}
	if it.GetToken() == "" {
		return "", false, providers.Transient("GitHubError", 10*time.Second,
			errors.New("GitHub answered the installation token request without a token"))
	}
	s.tok = it.GetToken()
	s.expires = it.GetExpiresAt().Time
	if s.expires.IsZero() {
		s.expires = now.Add(time.Hour) // GitHub's documented lifetime
	}
	return s.tok, true, nil
}

func (s *installationTokens) invalidate(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok == tok {
		s.tok, s.expires = "", time.Time{}
	}
}

// classify explains a failed mint: the App's credentials, not a pool's
// permissions, are at fault.
func (s *installationTokens) classify(err error) error {
	var resp *gogithub.ErrorResponse
	if errors.As(err, &resp) && resp.Response != nil {
		switch resp.Response.StatusCode {
		case http.StatusUnauthorized:
			return providers.Permanent("AuthenticationFailed",
				"GitHub refused the App's JSON web token: check appID and privateKey in the credentials Secret (the key may have been deleted from the App, or the clock is off by minutes)",
				fmt.Errorf("creating an installation token: %s", resp.Message))
		case http.StatusNotFound:
			return providers.Permanent("InstallationNotFound",
				fmt.Sprintf("GitHub App installation %d does not exist for this App: check installationID in the credentials Secret and that the App is still installed", s.installationID),
				fmt.Errorf("creating an installation token: %s", resp.Message))
		case http.StatusForbidden:
			if sig := parseRateLimit(resp.Response.StatusCode, resp.Response.Header, []byte(resp.Message+" "+resp.DocumentationURL), s.clock.Now(), DefaultSecondaryWait); !sig.limited {
				return providers.Permanent("PermissionDenied",
					fmt.Sprintf("GitHub refused an installation token for installation %d: the installation may be suspended", s.installationID),
					fmt.Errorf("creating an installation token: %s", resp.Message))
			}
		}
	}
	return fmt.Errorf("creating an installation token: %w", err)
}

// jwtTransport signs each request to the /app endpoints with a fresh JWT.
type jwtTransport struct {
	appID int64
	key   *rsa.PrivateKey
	clock clock.PassiveClock
	base  http.RoundTripper
}

func (t *jwtTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	signed, err := appJWT(t.appID, t.key, t.clock.Now())
	if err != nil {
		closeBody(req)
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+signed)
	return t.base.RoundTrip(r)
}

// appJWT is the App's RS256 JSON web token: iss is the App ID.
func appJWT(appID int64, key *rsa.PrivateKey, now time.Time) (string, error) {
	claims := jwt.RegisteredClaims{
		Issuer:    strconv.FormatInt(appID, 10),
		IssuedAt:  jwt.NewNumericDate(now.Add(-jwtBackdate)),
		ExpiresAt: jwt.NewNumericDate(now.Add(jwtLifetime)),
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(key)
	if err != nil {
		return "", providers.Permanent("InvalidPrivateKey", "signing the GitHub App JSON web token failed: check privateKey in the credentials Secret", nil)
	}
	return signed, nil
}

// authTransport puts the token on each request. When GitHub refuses a cached
// installation token (revoked, or expired early) it mints a new one and sends
// the request once more.
type authTransport struct {
	source tokenSource
	base   http.RoundTripper
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, fresh, err := t.source.token(req.Context())
	if err != nil {
		closeBody(req)
		return nil, err
	}
	res, err := t.base.RoundTrip(withToken(req, tok))
	if err != nil || res.StatusCode != http.StatusUnauthorized {
		return res, err
	}
	t.source.invalidate(tok)
	if fresh || (req.Body != nil && req.GetBody == nil) {
		return res, nil // a token minted just now, or a body that cannot be sent twice
	}
	tok2, _, terr := t.source.token(req.Context())
	if terr != nil || tok2 == tok {
		return res, nil // the 401 stands: no other token to try
	}
	retry := withToken(req, tok2)
	if req.GetBody != nil {
		body, berr := req.GetBody()
		if berr != nil {
			return res, nil
		}
		retry.Body = body
	}
	_ = res.Body.Close()
	return t.base.RoundTrip(retry)
}

func withToken(req *http.Request, tok string) *http.Request {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}
