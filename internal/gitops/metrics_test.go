package gitops_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// query is one PromQL expression and where it is used.
type query struct{ where, expr string }

// Grafana's range variables, replaced by durations so the PromQL parses.
var grafanaRanges = strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$__interval", "1m")

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

// variable is a dashboard template variable.
type variable struct {
	Name, Type, Query string
	IncludeAll        bool   `json:"includeAll"`
	AllValue          string `json:"allValue"`
	Current           struct {
		Value json.RawMessage `json:"value"`
	} `json:"current"`
}

type panel struct {
	Title      string          `json:"title"`
	Type       string          `json:"type"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Datasource json.RawMessage `json:"datasource"`
		Expr       string          `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func (p panel) all() []panel {
	out := []panel{p}
	for _, c := range p.Panels {
		out = append(out, c.all()...)
	}
	return out
}

func dashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	return out
}

func queries(t *testing.T) []query {
	t.Helper()
	var out []query
	for file, d := range dashboards(t) {
		for _, top := range d.Panels {
			for _, p := range top.all() {
				for _, target := range p.Targets {
					out = append(out, query{file + ": " + p.Title, target.Expr})
				}
			}
		}
	}
	for _, r := range alertRules(t) {
		out = append(out, query{"alert " + r.Alert, r.Expr})
	}
	return out
}

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "alerts", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Spec struct {
			Groups []struct {
				Rules []rule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range pr.Spec.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// metricNames returns the series a PromQL expression reads.
func metricNames(expr string) ([]string, error) {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaRanges.Replace(expr))
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// scrapeSeries are made by Prometheus itself, not the operator.
var scrapeSeries = map[string]bool{"up": true}

var histogramSuffix = regexp.MustCompile(`_(bucket|sum|count)$`)

// registered reports whether the controller-runtime registry holds a metric
// named name, from its collectors' descriptors (so also vectors that have
// no series yet): registering a probe with that name and different labels
// is refused exactly when a collector already describes it.
func registered(name string) bool {
	probe := probeCollector{prometheus.NewDesc(name, "gitops test probe", []string{"gitops_test_probe"}, nil)}
	if err := metrics.Registry.Register(probe); err != nil {
		return true
	}
	metrics.Registry.Unregister(probe)
	return false
}

type probeCollector struct{ desc *prometheus.Desc }

func (p probeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }
func (p probeCollector) Collect(chan<- prometheus.Metric)    {}

// Every series a dashboard panel or an alert reads is one the operator
// exports: the manager is built on the real API server with every
// reconciler and started (some collectors are registered only when their
// Runnable starts, the leader's only on the leader; the webhook receiver's,
// which every replica runs, at init), and its registry asked for each name.
func TestEveryQueriedMetricIsExported(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var opts manager.Options
	opts.BindFlags(fs)
	// Leader election off: this manager leads at once. No listeners: the
	// receiver is started (and registers its metrics) without a port.
	if err := fs.Parse([]string{"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--webhook-bind-address=0", "--operator-namespace=" + testenv.Namespace(t)}); err != nil {
		t.Fatal(err)
	}
	opts.SkipControllerNameValidation = true
	if err := opts.Complete(); err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(testenv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, mgr)
	// The probe itself must tell a present name from an absent one.
	if !registered("controller_runtime_reconcile_total") || registered("hyperfleet_no_such_metric_total") {
		t.Fatal("the registry probe cannot tell registered metrics")
	}

	used := map[string][]string{}
	for _, q := range queries(t) {
		names, err := metricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", q.where, q.expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q reads no series", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = append(used[n], q.where)
		}
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	exported := func(n string) bool {
		if scrapeSeries[n] || registered(n) {
			return true
		}
		base := histogramSuffix.ReplaceAllString(n, "")
		return base != n && registered(base)
	}
	// The leader's Runnables register their collectors as they start, just
	// after the manager reports itself elected: allow them a moment.
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) {
			return !slices.ContainsFunc(names, func(n string) bool { return !exported(n) }), nil
		})
	for _, n := range names {
		if !exported(n) {
			t.Errorf("%s is not exported by the operator; used by %s", n, strings.Join(slices.Compact(used[n]), "; "))
		}
	}
	t.Logf("%d metrics checked", len(names))
}

// startManager runs mgr until the test ends and waits until it leads, that
// is, until its leader-election Runnables have been started.
func startManager(t *testing.T, mgr ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var startErr error
	go func() {
		defer close(stopped)
		startErr = mgr.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
			if startErr != nil {
				t.Errorf("the manager stopped with %v", startErr)
			}
		case <-time.After(time.Minute):
			t.Error("the manager did not stop within a minute")
		}
	})
	select {
	case <-mgr.Elected():
	case <-stopped:
		t.Fatalf("the manager stopped before leading: %v", startErr)
	case <-time.After(2 * time.Minute):
		t.Fatal("the manager did not start its leader's Runnables within 2 minutes")
	}
}

// installJob is the job label the monitoring component's ServiceMonitor
// gives the operator's targets (the Service's name), the alerts select and
// the dashboards' `job` variable starts at.
const installJob = "hyperfleet-metrics"

// The dashboards ask for their data source through one variable, name no
// data source UID, and use Grafana's $__rate_interval (or $__range for
// totals over the shown range) in every range selector. They travel: every
// series they read is selected by the `job`, `cluster` and `namespace`
// variables, never a hard-coded job, so one dashboard serves any install,
// any job name and a Prometheus that holds several clusters.
func TestDashboards(t *testing.T) {
	for file, d := range dashboards(t) {
		if d.UID == "" || !strings.HasPrefix(d.Title, "HyperFleet / ") {
			t.Errorf("%s: uid %q, title %q", file, d.UID, d.Title)
		}
		checkVariables(t, file, d.Templating.List)
		for _, top := range d.Panels {
			for _, p := range top.all() {
				if p.Type == "row" {
					continue
				}
				for _, ds := range append([]json.RawMessage{p.Datasource}, targetsDatasources(p)...) {
					var ref struct{ Type, UID string }
					if err := json.Unmarshal(ds, &ref); err != nil || ref.UID != "${datasource}" {
						t.Errorf("%s: panel %q uses data source %s, want ${datasource}", file, p.Title, ds)
					}
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", file, p.Title)
				}
				for _, target := range p.Targets {
					checkRanges(t, file+": "+p.Title, target.Expr)
					checkSelectors(t, file+": "+p.Title, target.Expr)
				}
			}
		}
	}
}

// checkVariables: the dashboard declares `datasource` (a Prometheus), `job`
// (starting at the install's job), and `cluster` and `namespace` whose
// All, the default, is a regular expression that also matches a series
// without the label (a Prometheus of one cluster has no cluster label).
func checkVariables(t *testing.T, file string, vars []variable) {
	t.Helper()
	byName := map[string]variable{}
	for _, v := range vars {
		byName[v.Name] = v
	}
	if len(vars) != 4 || len(byName) != 4 {
		t.Errorf("%s: template variables %v, want datasource, job, cluster and namespace", file, slices.Collect(maps.Keys(byName)))
	}
	if v, ok := byName["datasource"]; !ok || v.Type != "datasource" || v.Query != "prometheus" {
		t.Errorf("%s: variable datasource %+v, want a prometheus data source", file, v)
	}
	if v, ok := byName["job"]; !ok || currentValue(v) != installJob || v.Query != installJob {
		t.Errorf("%s: variable job %+v, want one that starts at %q", file, v, installJob)
	}
	for _, name := range []string{"cluster", "namespace"} {
		v, ok := byName[name]
		if !ok {
			t.Errorf("%s: no variable %s", file, name)
			continue
		}
		all, err := regexp.Compile("^(?:" + v.AllValue + ")$")
		if v.Type != "query" || !v.IncludeAll || err != nil || !all.MatchString("") || !all.MatchString("prod-eu") {
			t.Errorf("%s: variable %s (type %q, includeAll %v, allValue %q) must offer All as a regular expression matching any value and none",
				file, name, v.Type, v.IncludeAll, v.AllValue)
		}
		if currentValue(v) != "$__all" {
			t.Errorf("%s: variable %s starts at %s, want All", file, name, v.Current.Value)
		}
		if !strings.Contains(v.Query, `job=~"$job"`) {
			t.Errorf("%s: variable %s lists values with %q, want them from the selected job", file, name, v.Query)
		}
	}
}

// currentValue is a variable's current value, the first if it is a list.
func currentValue(v variable) string {
	var one string
	if json.Unmarshal(v.Current.Value, &one) == nil {
		return one
	}
	var many []string
	if json.Unmarshal(v.Current.Value, &many) == nil && len(many) > 0 {
		return many[0]
	}
	return ""
}

// selectedBy are the matchers every series a dashboard reads must carry.
var selectedBy = map[string]string{"job": "$job", "cluster": "$cluster", "namespace": "$namespace"}

// checkSelectors: every series expr reads is selected by the job, cluster
// and namespace variables, as regular expressions (so All and several
// values work), and by no literal job.
func checkSelectors(t *testing.T, where, expr string) {
	t.Helper()
	node, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaRanges.Replace(expr))
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		for label, value := range selectedBy {
			found := slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
				return m.Name == label && m.Type == labels.MatchRegexp && m.Value == value
			})
			if !found {
				t.Errorf("%s: %s is not selected by %s=~%q", where, vs, label, value)
			}
		}
		return nil
	})
}

func targetsDatasources(p panel) []json.RawMessage {
	var out []json.RawMessage
	for _, t := range p.Targets {
		out = append(out, t.Datasource)
	}
	return out
}

func checkRanges(t *testing.T, where, expr string) {
	t.Helper()
	// Mark the variables with durations no one would type.
	marked := strings.NewReplacer("$__rate_interval", "7777s", "$__range", "8888s").Replace(expr)
	node, err := parser.NewParser(parser.Options{}).ParseExpr(marked)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	parser.Inspect(node, func(n parser.Node, path []parser.Node) error {
		ms, ok := n.(*parser.MatrixSelector)
		if !ok {
			return nil
		}
		secs := ms.Range.Seconds()
		fn := ""
		if len(path) > 0 {
			if call, ok := path[len(path)-1].(*parser.Call); ok {
				fn = call.Func.Name
			}
		}
		switch {
		case secs == 7777:
		case secs == 8888 && fn == "increase":
		default:
			t.Errorf("%s: %s[%s] should use $__rate_interval", where, fn, ms.Range)
		}
		return nil
	})
}

// Every alert has a severity, a summary, a description and a runbook in
// docs/runbooks that exists.
func TestAlertsHaveRunbooks(t *testing.T) {
	rules := alertRules(t)
	want := []string{"HyperFleetOperatorDown", "HyperFleetReconcileErrorRatio", "HyperFleetProviderAPIFailing",
		"HyperFleetMachinesStuckProvisioning", "HyperFleetOrphanVMsFound", "HyperFleetNoLeader", "HyperFleetFinalizerDeadlineExceeded",
		"HyperFleetRunnerQueueLatencyHigh", "HyperFleetGitHubRateLimitNearlyExhausted", "HyperFleetWebhookDeliveriesRejected",
		"HyperFleetRunnerDeregistrationFailing", "HyperFleetPerformersNotReady", "HyperFleetExecutorUnavailable",
		"HyperFleetCredentialRequestsRefused", "HyperFleetScaleSetNoSession", "HyperFleetStandbyHitRateLow"}
	var got []string
	for _, r := range rules {
		got = append(got, r.Alert)
		if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
			t.Errorf("%s: severity %q", r.Alert, s)
		}
		for _, a := range []string{"summary", "description"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s has no %s", r.Alert, a)
			}
		}
		wantURL := "https://github.com/hyperfleet/hyperfleet/blob/main/docs/runbooks/" + r.Alert + ".md"
		if r.Annotations["runbook_url"] != wantURL {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], wantURL)
		}
		if _, err := os.Stat(filepath.Join(root, "docs", "runbooks", r.Alert+".md")); err != nil {
			t.Errorf("%s: %v", r.Alert, err)
		}
		tests := filepath.Join(root, "alerts", "tests", r.Alert+".yaml")
		if _, err := os.Stat(tests); errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s has no promtool tests (%s)", r.Alert, tests)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("alerts %v, want %v", got, want)
	}
}
