package github

import (
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"k8s.io/utils/clock"

	"github.com/hyperfleet/hyperfleet/providers"
)

// DefaultTimeout bounds one HTTP request when Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Secret data keys ConfigFromSecret reads. The second spelling of each is the
// one actions-runner-controller uses, so its Secrets work unchanged.
const (
	SecretKeyAppID          = "appID"
	SecretKeyInstallationID = "installationID"
	SecretKeyPrivateKey     = "privateKey"
	SecretKeyToken          = "token"

	arcKeyAppID          = "github_app_id"
	arcKeyInstallationID = "github_app_installation_id"
	arcKeyPrivateKey     = "github_app_private_key"
	arcKeyToken          = "github_token"
)

// Config is everything a Client needs. It holds no Kubernetes type: the
// caller reads the Secret and the pool's settings and fills it in.
type Config struct {
	// BaseURL of the REST API. Empty means https://api.github.com/. Any other
	// value is a GitHub Enterprise Server, e.g. https://ghe.example.com/api/v3/
	// ("/api/v3/" is added when missing, as go-github's WithEnterpriseURLs does).
	BaseURL string

	// AppID, InstallationID and PrivateKeyPEM authenticate as a GitHub App
	// installation. They win over Token when both are set.
	AppID          int64
	InstallationID int64
	PrivateKeyPEM  []byte

	// Token is a personal access token (classic or fine-grained).
	Token string

	// Timeout bounds one HTTP request; zero means DefaultTimeout.
	Timeout time.Duration

	// RateLimiter is the budget shared with every other Client; nil means
	// DefaultRateLimiter(). Clients with their own RateLimiter do not see
	// each other's budgets, so give all Clients of a process the same one.
	RateLimiter *RateLimiter

	// Clock decides installation-token expiry and JWT claims; nil is the
	// real clock. Tests share a fake one with the simulator.
	Clock clock.PassiveClock

	// Transport is the base HTTP transport (proxies, custom CAs); nil builds
	// a fresh http.Transport per Client.
	Transport http.RoundTripper

	// UserAgent sent with every request; empty means "hyperfleet".
	UserAgent string
}

// String describes the Config with its secrets redacted, so a Config
// printed by accident (%v, %+v) leaks nothing.
func (c Config) String() string {
	redacted := func(set bool) string {
		if set {
			return "[redacted]"
		}
		return "[none]"
	}
	return fmt.Sprintf("github.Config{BaseURL: %q, AppID: %d, InstallationID: %d, PrivateKeyPEM: %s, Token: %s, Timeout: %s}",
		normalizeBaseURL(c.BaseURL), c.AppID, c.InstallationID, redacted(len(c.PrivateKeyPEM) > 0), redacted(c.Token != ""), c.timeout())
}

// GoString redacts as String does (%#v).
func (c Config) GoString() string { return c.String() }

// AuthKind is how a Client authenticates.
type AuthKind string

const (
	// AuthApp is a GitHub App installation.
	AuthApp AuthKind = "app"
	// AuthToken is a personal access token.
	AuthToken AuthKind = "token"
)

// Kind reports which credentials the Config carries (App wins over Token),
// or "" when it carries neither.
func (c Config) Kind() AuthKind {
	switch {
	case c.AppID != 0 || c.InstallationID != 0 || len(c.PrivateKeyPEM) > 0:
		return AuthApp
	case c.Token != "":
		return AuthToken
	}
	return ""
}

// ConfigFromSecret reads credentials from a Secret's data: appID,
// installationID and privateKey for a GitHub App, or token for a personal
// access token (github_app_id, github_app_installation_id,
// github_app_private_key and github_token are accepted too). It fills only the
// credential fields; the caller sets BaseURL, Timeout and RateLimiter. Errors
// name the missing or malformed key, never its value.
func ConfigFromSecret(data map[string][]byte) (Config, error) {
	get := func(keys ...string) (string, string) {
		for _, k := range keys {
			if v, ok := data[k]; ok && len(strings.TrimSpace(string(v))) > 0 {
				return k, string(v)
			}
		}
		return keys[0], ""
	}
	var cfg Config
	appKey, appID := get(SecretKeyAppID, arcKeyAppID)
	instKey, instID := get(SecretKeyInstallationID, arcKeyInstallationID)
	_, privateKey := get(SecretKeyPrivateKey, arcKeyPrivateKey)
	_, token := get(SecretKeyToken, arcKeyToken)

	if appID == "" && instID == "" && privateKey == "" {
		if token == "" {
			return cfg, providers.Permanent("CredentialsIncomplete",
				"the GitHub credentials Secret has neither a GitHub App (appID, installationID, privateKey) nor a personal access token (token)", nil)
		}
		cfg.Token = strings.TrimSpace(token)
		return cfg, nil
	}
	var err error
	if cfg.AppID, err = parseID(appKey, appID); err != nil {
		return Config{}, err
	}
	if cfg.InstallationID, err = parseID(instKey, instID); err != nil {
		return Config{}, err
	}
	if privateKey == "" {
		return Config{}, providers.Permanent("CredentialsIncomplete",
			"the GitHub credentials Secret has a GitHub App ID but no privateKey", nil)
	}
	cfg.PrivateKeyPEM = []byte(privateKey)
	return cfg, nil
}

func parseID(key, value string) (int64, error) {
	if value == "" {
		return 0, providers.Permanent("CredentialsIncomplete",
			fmt.Sprintf("the GitHub credentials Secret has a GitHub App private key but no %s", key), nil)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
	if err != nil || id <= 0 {
		return 0, providers.Permanent("InvalidCredentials",
			fmt.Sprintf("%s in the GitHub credentials Secret must be a positive number", key), nil)
	}
	return id, nil
}

// Fingerprint identifies the client this Config builds: equal for equal
// credentials, base URL and timeout, different as soon as any of them
// changes (a rotated key, a new token). It is a hash, safe to log or to use as
// a map key; it reveals nothing about the secrets.
func (c Config) Fingerprint() string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte("hyperfleet-github-v1"))
	field([]byte(normalizeBaseURL(c.BaseURL)))
	field([]byte(c.Kind()))
	field([]byte(strconv.FormatInt(c.AppID, 10)))
	field([]byte(strconv.FormatInt(c.InstallationID, 10)))
	field(c.PrivateKeyPEM)
	field([]byte(c.Token))
	field([]byte(c.timeout().String()))
	field([]byte(c.UserAgent))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (c Config) timeout() time.Duration {
	if c.Timeout <= 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// budgetKey names the rate-limit budget GitHub charges this Config's calls
// to: an installation's or a token's, per GitHub host. Rotating an App's
// private key keeps the budget; it belongs to the installation.
func (c Config) budgetKey() string {
	host := normalizeBaseURL(c.BaseURL)
	if c.Kind() == AuthApp {
		return fmt.Sprintf("%s installation:%d", host, c.InstallationID)
	}
	sum := sha256.Sum256([]byte(c.Token))
	return fmt.Sprintf("%s token:%s", host, hex.EncodeToString(sum[:8]))
}

// appBudgetKey is the budget of calls authenticated with the App's JWT.
func (c Config) appBudgetKey() string {
	return fmt.Sprintf("%s app:%d", normalizeBaseURL(c.BaseURL), c.AppID)
}

// normalizeBaseURL returns the API root with a trailing slash; the public
// API for an empty value.
func normalizeBaseURL(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "https://api.github.com/"
	}
	if !strings.HasSuffix(s, "/") {
		s += "/"
	}
	return s
}

// isPublicGitHub reports whether base is github.com's API rather than an
// Enterprise Server.
func isPublicGitHub(base string) bool {
	u, err := url.Parse(base)
	return err == nil && strings.EqualFold(u.Host, "api.github.com")
}

func (c Config) validate() error {
	switch c.Kind() {
	case "":
		return providers.Permanent("CredentialsIncomplete",
			"no GitHub credentials: the Secret needs a GitHub App (appID, installationID, privateKey) or a personal access token (token)", nil)
	case AuthApp:
		switch {
		case c.AppID <= 0:
			return providers.Permanent("CredentialsIncomplete", "the GitHub App ID is missing: set appID in the credentials Secret", nil)
		case c.InstallationID <= 0:
			return providers.Permanent("CredentialsIncomplete", "the GitHub App installation ID is missing: set installationID in the credentials Secret", nil)
		case len(c.PrivateKeyPEM) == 0:
			return providers.Permanent("CredentialsIncomplete", "the GitHub App private key is missing: set privateKey in the credentials Secret", nil)
		}
	case AuthToken:
		if strings.ContainsAny(c.Token, " \t\r\n") {
			return providers.Permanent("InvalidCredentials", "the GitHub token in the credentials Secret contains whitespace", nil)
		}
	}
	if c.BaseURL != "" {
		u, err := url.Parse(strings.TrimSpace(c.BaseURL))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return providers.Permanent("InvalidAPIURL",
				"the GitHub API URL must be an absolute http(s) URL such as https://ghe.example.com/api/v3/: fix spec.github.apiURL", nil)
		}
	}
	return nil
}

// parsePrivateKey reads the App's RSA key from PEM (PKCS#1 or PKCS#8), or
// from base64-encoded PEM, a common way to store it in a secret manager. The
// key's bytes never reach an error.
func parsePrivateKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	text := strings.TrimSpace(string(pemBytes))
	if !strings.HasPrefix(text, "-----BEGIN") {
		if dec, err := base64.StdEncoding.DecodeString(text); err == nil && strings.HasPrefix(strings.TrimSpace(string(dec)), "-----BEGIN") {
			text = strings.TrimSpace(string(dec))
		}
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(text))
	if err != nil {
		return nil, providers.Permanent("InvalidPrivateKey",
			"the GitHub App private key in the credentials Secret is not an RSA private key in PEM form: paste the .pem file GitHub generated for the App", nil)
	}
	return key, nil
}
