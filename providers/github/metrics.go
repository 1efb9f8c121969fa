package github

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Operation names used as the operation label; they never carry an ID.
const (
	opCreateInstallationToken = "create_installation_token"
	opCreateRegistrationToken = "create_registration_token"
	opCreateRemoveToken       = "create_remove_token"
	opGenerateJITConfig       = "generate_jitconfig"
	opListRunners             = "list_runners"
	opGetRunner               = "get_runner"
	opDeleteRunner            = "delete_runner"
	opListRunnerGroups        = "list_runner_groups"
	opListQueuedRuns          = "list_queued_runs"
	opListRunJobs             = "list_run_jobs"
	opGetJob                  = "get_job"
	opListOrgRepos            = "list_org_repos"
	opOther                   = "other"
)

var (
	apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_github_api_requests_total",
		Help: "Requests sent to the GitHub API by operation and HTTP status code (\"error\" when no answer came).",
	}, []string{"operation", "code"})
	apiRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hyperfleet_github_api_request_duration_seconds",
		Help:    "Latency of requests to the GitHub API by operation.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"operation"})
	throttled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_github_requests_throttled_total",
		Help: "GitHub API calls refused locally, without being sent, because a rate-limit budget was spent or a Retry-After was in force.",
	}, []string{"operation"})
	rateLimitRemaining = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hyperfleet_github_rate_limit_remaining",
		Help: "Requests left in the GitHub rate-limit window, from the latest answers' X-RateLimit-Remaining; with several credentials, the lowest of them. resource is X-RateLimit-Resource (core, ...).",
	}, []string{"resource"})

	registerOnce sync.Once
)

// registerMetrics registers the collectors on controller-runtime's registry,
// once however many Clients and RateLimiters are built.
func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(apiRequests, apiRequestDuration, throttled, rateLimitRemaining)
	})
}

// operations maps API paths (after an Enterprise Server's /api/v3) to
// operation names; the first match of method and path wins.
var operations = []struct {
	method  string
	pattern *regexp.Regexp
	name    string
}{
	{http.MethodPost, regexp.MustCompile(`^/app/installations/\d+/access_tokens$`), opCreateInstallationToken},
	{http.MethodPost, regexp.MustCompile(`^/(repos/[^/]+/[^/]+|orgs/[^/]+)/actions/runners/registration-token$`), opCreateRegistrationToken},
	{http.MethodPost, regexp.MustCompile(`^/(repos/[^/]+/[^/]+|orgs/[^/]+)/actions/runners/remove-token$`), opCreateRemoveToken},
	{http.MethodPost, regexp.MustCompile(`^/(repos/[^/]+/[^/]+|orgs/[^/]+)/actions/runners/generate-jitconfig$`), opGenerateJITConfig},
	{http.MethodGet, regexp.MustCompile(`^/(repos/[^/]+/[^/]+|orgs/[^/]+)/actions/runners$`), opListRunners},
	{http.MethodGet, regexp.MustCompile(`^/(repos/[^/]+/[^/]+|orgs/[^/]+)/actions/runners/\d+$`), opGetRunner},
	{http.MethodDelete, regexp.MustCompile(`^/(repos/[^/]+/[^/]+|orgs/[^/]+)/actions/runners/\d+$`), opDeleteRunner},
	{http.MethodGet, regexp.MustCompile(`^/orgs/[^/]+/actions/runner-groups$`), opListRunnerGroups},
	{http.MethodGet, regexp.MustCompile(`^/repos/[^/]+/[^/]+/actions/runs$`), opListQueuedRuns},
	{http.MethodGet, regexp.MustCompile(`^/repos/[^/]+/[^/]+/actions/runs/\d+/jobs$`), opListRunJobs},
	{http.MethodGet, regexp.MustCompile(`^/repos/[^/]+/[^/]+/actions/jobs/\d+$`), opGetJob},
	{http.MethodGet, regexp.MustCompile(`^/orgs/[^/]+/repos$`), opListOrgRepos},
}

func operation(r *http.Request) string {
	path := r.URL.Path
	if i := strings.Index(path, "/api/v3/"); i >= 0 {
		path = path[i+len("/api/v3"):]
	}
	for _, op := range operations {
		if r.Method == op.method && op.pattern.MatchString(path) {
			return op.name
		}
	}
	return opOther
}

// instrumentedTransport counts and times every request that is sent.
type instrumentedTransport struct {
	base http.RoundTripper
}

func (t *instrumentedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := operation(req)
	start := time.Now()
	res, err := t.base.RoundTrip(req)
	apiRequestDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	code := "error"
	if err == nil {
		code = strconv.Itoa(res.StatusCode)
	}
	apiRequests.WithLabelValues(op, code).Inc()
	return res, err
}
