package github

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	gogithub "github.com/google/go-github/v60/github"
	"k8s.io/utils/clock"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Client manages self-hosted runners through the GitHub REST API with one set
// of credentials. It is safe for concurrent use; one Client serves every pool
// whose credentials have the same Fingerprint, whatever their scope.
type Client struct {
	gh          *gogithub.Client
	kind        AuthKind
	fingerprint string
	webURL      string
	limiter     *RateLimiter
	clock       clock.PassiveClock
	owned       *http.Transport // closed by Close; nil when Config.Transport was given

	groupsMu sync.Mutex
	groups   map[string]cachedGroups // by organization
}

type cachedGroups struct {
	groups  []RunnerGroup
	fetched time.Time
}

const (
	// groupCacheTTL bounds how old a runner-group listing used to resolve a
	// name may be: groups change rarely, and every lookup costs budget.
	groupCacheTTL = 5 * time.Minute
	// groupMissTTL: a name missing from a listing younger than this is not
	// looked up again, so a misspelt group does not cost a request per call.
	groupMissTTL = 30 * time.Second
)

var _ RunnerService = (*Client)(nil)

// New validates cfg and builds a Client. It makes no request: bad
// credentials show on the first call. The private key is parsed here, so a
// malformed one is reported at once.
func New(cfg Config) (*Client, error) {
	registerMetrics()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{
		kind:        cfg.Kind(),
		fingerprint: cfg.Fingerprint(),
		limiter:     cfg.RateLimiter,
		clock:       cfg.Clock,
		groups:      map[string]cachedGroups{},
	}
	if c.limiter == nil {
		c.limiter = DefaultRateLimiter()
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	base := cfg.Transport
	if base == nil {
		c.owned = newTransport()
		base = c.owned
	}
	sent := &instrumentedTransport{base: &providers.RedactingTransport{Base: &providers.BoundedTransport{Base: base, MaxBody: MaxResponseBytes}}}

	var source tokenSource
	switch c.kind {
	case AuthApp:
		key, err := parsePrivateKey(cfg.PrivateKeyPEM)
		if err != nil {
			return nil, err
		}
		appHTTP := &http.Client{
			Timeout: cfg.timeout(),
			Transport: &limitTransport{limiter: c.limiter, key: cfg.appBudgetKey(),
				base: &jwtTransport{appID: cfg.AppID, key: key, clock: c.clock, base: sent}},
		}
		apps, err := newGitHub(appHTTP, cfg)
		if err != nil {
			return nil, err
		}
		source = &installationTokens{installationID: cfg.InstallationID, apps: apps, clock: c.clock}
	default:
		source = staticToken(cfg.Token)
	}
	httpClient := &http.Client{
		Timeout: cfg.timeout(),
		Transport: &limitTransport{limiter: c.limiter, key: cfg.budgetKey(),
			base: &authTransport{source: source, base: sent}},
	}
	gh, err := newGitHub(httpClient, cfg)
	if err != nil {
		return nil, err
	}
	c.gh = gh
	c.webURL = webURL(gh.BaseURL)
	return c, nil
}

// newGitHub builds a go-github client for cfg's API root: github.com's, or an
// Enterprise Server's through WithEnterpriseURLs (which adds /api/v3/).
func newGitHub(hc *http.Client, cfg Config) (*gogithub.Client, error) {
	gh := gogithub.NewClient(hc)
	gh.UserAgent = cfg.UserAgent
	if gh.UserAgent == "" {
		gh.UserAgent = "hyperfleet"
	}
	base := normalizeBaseURL(cfg.BaseURL)
	if isPublicGitHub(base) {
		return gh, nil
	}
	ghes, err := gh.WithEnterpriseURLs(base, base)
	if err != nil {
		return nil, providers.Permanent("InvalidAPIURL",
			"the GitHub API URL is not a valid URL: fix spec.github.apiURL", nil)
	}
	return ghes, nil
}

// webURL is the web root runners register against: https://github.com/ for
// api.github.com, the server's root for an Enterprise Server.
func webURL(api *url.URL) string {
	if strings.EqualFold(api.Host, "api.github.com") {
		return "https://github.com/"
	}
	u := *api
	// GHE.com and subdomain-isolated servers put the API on an api. host.
	if host, ok := strings.CutPrefix(strings.ToLower(u.Host), "api."); ok {
		u.Host = host
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/api/v3") + "/"
	u.RawQuery, u.Fragment = "", ""
	return u.String()
}

// MaxResponseBytes bounds one GitHub answer: a page of 100 runners or jobs
// is tens of kilobytes; a server sending more is refused, not buffered.
const MaxResponseBytes = 8 << 20

func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           providers.Dialer().DialContext,
		TLSHandshakeTimeout:   providers.TLSHandshakeTimeout,
		ResponseHeaderTimeout: providers.DefaultResponseHeaderTimeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
	}
}

// Fingerprint is the Fingerprint of the Config the Client was built from.
func (c *Client) Fingerprint() string { return c.fingerprint }

// Kind says how the Client authenticates.
func (c *Client) Kind() AuthKind { return c.kind }

// RunnerURL is the URL a runner registers with (config.sh --url):
// https://github.com/owner/repo, or the organization's, on github.com or the
// Enterprise Server the Client talks to.
func (c *Client) RunnerURL(scope Scope) string {
	return c.webURL + scope.path()
}

// Close releases the Client's idle connections. Calls made after Close still
// work (on new connections); a caller closes a Client it replaced.
func (c *Client) Close() {
	if c.owned != nil {
		c.owned.CloseIdleConnections()
	}
}
