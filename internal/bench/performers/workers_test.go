package performers

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/bench/proc"
)

// metricsAddr is where the operator serves its metrics: a loopback port
// free when the package starts.
var metricsAddr = freeLoopback()

func freeLoopback() string {
	addr, err := proc.FreeAddress()
	if err != nil {
		return "0"
	}
	return addr
}

// performerWorkers reads controller-runtime's
// controller_runtime_max_concurrent_reconciles for the Performer
// controller from the running operator, so the table shows the count in
// effect (the default, or PERF_WORKERS through --workers), not the one
// asked for.
func performerWorkers(b *testing.B) string {
	b.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var last error
	for range 20 {
		v, err := scrapeGauge(client, "controller_runtime_max_concurrent_reconciles", `controller="performer"`)
		if err == nil {
			return v
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	return "unknown (" + last.Error() + ")"
}

func scrapeGauge(client *http.Client, name, label string) (string, error) {
	resp, err := client.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) {
			fields := strings.Fields(line)
			return fields[len(fields)-1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no %s{%s} in /metrics", name, label)
}
