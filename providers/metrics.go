package providers

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	providerRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hyperfleet_provider_requests_total",
		Help: "Requests to hypervisor APIs by provider, operation and HTTP status code (\"error\" when no answer came).",
	}, []string{"provider", "operation", "code"})
	providerRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hyperfleet_provider_request_duration_seconds",
		Help:    "Latency of requests to hypervisor APIs by provider and operation.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"provider", "operation"})
)

func init() {
	metrics.Registry.MustRegister(providerRequests, providerRequestDuration)
}

// InstrumentedTransport counts and times every request a provider's client
// makes. operation names a request for the metrics; it must map paths to a
// small fixed set, never include IDs.
type InstrumentedTransport struct {
	Provider  string
	Operation func(*http.Request) string
	Base      http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *InstrumentedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op := t.Operation(req)
	start := time.Now()
	res, err := t.Base.RoundTrip(req)
	providerRequestDuration.WithLabelValues(t.Provider, op).Observe(time.Since(start).Seconds())
	code := "error"
	if err == nil {
		code = strconv.Itoa(res.StatusCode)
	}
	providerRequests.WithLabelValues(t.Provider, op, code).Inc()
	return res, err
}
