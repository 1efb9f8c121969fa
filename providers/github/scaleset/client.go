package scaleset

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/actions/scaleset"

	"github.com/hyperfleet/hyperfleet/providers/github"
)

// SystemName is how HyperFleet introduces itself to the scale-set service
// (its User-Agent and system info).
const SystemName = "hyperfleet"

// ClientConfig says where a pool's scale set lives and how to reach it.
type ClientConfig struct {
	// Credentials are the pool's GitHub credentials: an App installation
	// or a personal access token (github.Config's fields; its BaseURL is
	// not used, ConfigURL says where).
	Credentials github.Config
	// ConfigURL is the scale set's scope as a web URL: https://github.com/<org>,
	// https://github.com/<owner>/<repo> or https://github.com/enterprises/<name>,
	// or the same on a GitHub Enterprise Server.
	ConfigURL string
	// Version is HyperFleet's version, sent as system info.
	Version string
	// Timeout bounds one request (the message poll waits up to 50 s on its
	// own and is given at least a minute); zero means github.DefaultTimeout.
	Timeout time.Duration
	// RetryMax is how often the library retries a failed request; zero
	// means its default. Tests set -1 for none.
	RetryMax int
}

// NewClient builds GitHub's scale-set client for cfg. It makes no request:
// refused credentials show on the first call.
func NewClient(cfg ClientConfig) (*scaleset.Client, error) {
	if err := checkConfigURL(cfg.ConfigURL); err != nil {
		return nil, err
	}
	info := scaleset.SystemInfo{System: SystemName, Version: cfg.Version}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = github.DefaultTimeout
	}
	opts := []scaleset.HTTPOption{scaleset.WithTimeout(max(timeout, time.Minute))}
	switch {
	case cfg.RetryMax < 0:
		opts = append(opts, scaleset.WithRetryMax(0))
	case cfg.RetryMax > 0:
		opts = append(opts, scaleset.WithRetryMax(cfg.RetryMax))
	}
	c := cfg.Credentials
	switch c.Kind() {
	case github.AuthApp:
		return scaleset.NewClientWithGitHubApp(scaleset.ClientWithGitHubAppConfig{
			GitHubConfigURL: cfg.ConfigURL, SystemInfo: info,
			GitHubAppAuth: scaleset.GitHubAppAuth{
				// GitHub takes the App's ID as the JWT's issuer as well as
				// its client ID.
				ClientID: strconv.FormatInt(c.AppID, 10), InstallationID: c.InstallationID, PrivateKey: string(c.PrivateKeyPEM),
			},
		}, opts...)
	case github.AuthToken:
		return scaleset.NewClientWithPersonalAccessToken(scaleset.NewClientWithPersonalAccessTokenConfig{
			GitHubConfigURL: cfg.ConfigURL, PersonalAccessToken: c.Token, SystemInfo: info,
		}, opts...)
	}
	return nil, errors.New("scaleset: the credentials hold neither a GitHub App (appID, installationID, privateKey) nor a token")
}

// checkConfigURL refuses what the library would refuse later, with a
// message that says what a scope URL looks like.
func checkConfigURL(raw string) error {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("scaleset: %q is not a URL; the scope is https://github.com/<org>, https://github.com/<owner>/<repo> or https://github.com/enterprises/<name>", raw)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if parts[0] == "" || len(parts) > 2 {
		return fmt.Errorf("scaleset: %q names no organization, repository or enterprise", raw)
	}
	return nil
}

// ConfigURL is the web URL of a scope that the scale-set client takes,
// from the REST API's URL as a pool gives it (empty for github.com, an
// Enterprise Server's https://host/api/v3/ otherwise): a repository when
// repository is set, else the organization.
func ConfigURL(apiURL, owner, repository, organization string) string {
	web := "https://github.com"
	if apiURL != "" {
		web = strings.TrimRight(apiURL, "/")
		web = strings.TrimSuffix(web, "/api/v3")
		web = strings.TrimRight(web, "/")
	}
	if repository != "" {
		return web + "/" + owner + "/" + repository
	}
	return web + "/" + organization
}
