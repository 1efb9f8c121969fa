package githubsim

import (
	"crypto/rsa"
	"log"
	"time"

	"k8s.io/utils/clock"
)

// Options configure a simulated GitHub. The zero value is a working server:
// organization "acme" with repository "acme/widgets", a GitHub App installed
// on it, one personal access token, 5000 requests per hour per credential and
// one-second jobs.
type Options struct {
	// AppID and InstallationID of the simulated GitHub App; defaults 1001 and 2002.
	AppID, InstallationID int64
	// AppKey is the App's private key; nil generates a 2048-bit one (which
	// takes a moment: tests that start many servers share one key).
	AppKey *rsa.PrivateKey

	// Organizations that exist; default ["acme"] unless Repositories names
	// owners. Every organization has the runner group "Default" (ID 1).
	Organizations []string
	// Repositories ("owner/name") that exist; default ["acme/widgets"]. An
	// owner that is not an organization is a user.
	Repositories []string

	// PersonalAccessTokens accepted besides a generated one (see PAT).
	PersonalAccessTokens []string

	// InstallationTokenTTL is how long an installation token is valid; default 1h.
	InstallationTokenTTL time.Duration
	// RegistrationTokenTTL is how long registration and remove tokens are valid; default 1h.
	RegistrationTokenTTL time.Duration

	// RateLimit is each credential's budget per RateLimitWindow; default 5000 per hour.
	RateLimit       int
	RateLimitWindow time.Duration

	// JobDuration is how long a job runs once a runner takes it; default 1s.
	JobDuration time.Duration
	// RunnerStartDelay is how long a started runner takes to show online; default 0.
	RunnerStartDelay time.Duration

	// MessagePollWait is how long a scale set's message poll waits for a
	// message before answering 202; default 50s, as GitHub's.
	MessagePollWait time.Duration
	// SessionTokenTTL is how long a message session's queue token is
	// valid; default 1h.
	SessionTokenTTL time.Duration
	// SessionIdleTimeout is how long a message session nobody polls stays
	// open, refusing another (409), before it lapses: a listener that died
	// without deleting its session holds the scale set that long. GitHub
	// does not publish its figure; default 2m.
	SessionIdleTimeout time.Duration

	// WebhookURL receives workflow_job deliveries; empty records them unsent.
	WebhookURL string
	// WebhookSecret signs deliveries (X-Hub-Signature-256); empty sends them unsigned.
	WebhookSecret string
	// WebhookTimeout bounds one delivery; default 10s, as GitHub's.
	WebhookTimeout time.Duration
	// DeliveryConcurrency is how many deliveries are in flight at once.
	// GitHub sends deliveries concurrently and in no promised order; the
	// default 1 sends them one at a time, in order, each after the previous
	// one's answer, which tests asserting the order of a job's events rely
	// on. A burst of queued jobs needs more: one at a time, 500 deliveries
	// took 47 s to send (make bench-runners).
	DeliveryConcurrency int

	// Clock decides token expiry, JWT validity, rate-limit windows and
	// timestamps; nil is the real clock. Job and start timers run on real time.
	Clock clock.PassiveClock

	// ErrorLog receives the HTTP server's errors; nil discards them.
	ErrorLog *log.Logger
}

func (o Options) withDefaults() Options {
	if o.AppID == 0 {
		o.AppID = 1001
	}
	if o.InstallationID == 0 {
		o.InstallationID = 2002
	}
	if len(o.Organizations) == 0 && len(o.Repositories) == 0 {
		o.Organizations = []string{"acme"}
	}
	if len(o.Repositories) == 0 {
		o.Repositories = []string{"acme/widgets"}
	}
	o.Organizations = append([]string(nil), o.Organizations...)
	o.Repositories = append([]string(nil), o.Repositories...)
	o.PersonalAccessTokens = append([]string(nil), o.PersonalAccessTokens...)
	if o.InstallationTokenTTL <= 0 {
		o.InstallationTokenTTL = time.Hour
	}
	if o.RegistrationTokenTTL <= 0 {
		o.RegistrationTokenTTL = time.Hour
	}
	if o.RateLimit <= 0 {
		o.RateLimit = 5000
	}
	if o.RateLimitWindow <= 0 {
		o.RateLimitWindow = time.Hour
	}
	if o.JobDuration <= 0 {
		o.JobDuration = time.Second
	}
	if o.WebhookTimeout <= 0 {
		o.WebhookTimeout = 10 * time.Second
	}
	if o.DeliveryConcurrency <= 0 {
		o.DeliveryConcurrency = 1
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}
