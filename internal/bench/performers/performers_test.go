package performers

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/bench"
	"github.com/hyperfleet/hyperfleet/internal/bench/proc"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

const (
	defaultN = 200
	// defaultIdle is the idle window; `make bench` shortens it.
	defaultIdle = 2 * time.Minute
	// creators is how many requests the benchmark's client keeps in
	// flight: "at once" without a client-side limit.
	creators = 100
)

// BenchmarkPerformers creates PERF_N Performers at once (200 by default)
// while the real operator runs as its own process, and prints the issue-15
// table: time until every Pod and Service exists, p50/p99, time until
// every Pod and every Performer is Ready, requests and writes per
// performer counted by the API server's audit log, writes in the idle
// window after (PERF_IDLE, 2m by default), peak RSS and CPU seconds. The
// aims are printed beside the figures, never asserted: on a shared machine
// times are readings.
func BenchmarkPerformers(b *testing.B) {
	n, idle := envInt("PERF_N", defaultN), envDuration("PERF_IDLE", defaultIdle)
	for range b.N {
		performers(b, n, idle)
	}
}

func performers(b *testing.B, n int, idle time.Duration) {
	b.StopTimer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := *planeCfg
	cfg.QPS = -1 // the unthrottled client
	c, err := client.NewWithWatch(&cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{"hyperfleet-system", "warmup", "bench"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	waitDefaultServiceAccount(b, c, "warmup")
	waitDefaultServiceAccount(b, c, "bench")
	// PERF_OPERATOR runs another build (an earlier commit's) for a
	// before/after comparison on the same machine.
	build := operatorBuild(b)
	bin := os.Getenv("PERF_OPERATOR")
	if bin == "" {
		if bin, err = testenv.BuildOperator(ctx, b.TempDir(), build.tags...); err != nil {
			b.Fatal(err)
		}
	}
	op := startOperator(b, bin, build)
	b.Logf("operator %s (%s build)", bin, build.name)

	// One Performer through to Ready first: the operator's caches are
	// synced and its clients connected before the clock starts.
	warm := newTracker(1)
	go bench.Follow(ctx, c, &hourglassv1alpha1.PerformerList{}, "warmup", func(o any, at time.Time) { warm.onPerformer(o.(*hourglassv1alpha1.Performer), at) }, nil)
	if err := c.Create(ctx, newPerformer("warmup", "w00000")); err != nil {
		b.Fatal(err)
	}
	wait(b, op, warm.allReady, 3*time.Minute, "the warm-up Performer to be Ready", warm.progress)
	workers := performerWorkers(b)

	t := newTracker(n)
	go bench.Follow(ctx, c, &corev1.PodList{}, "bench", func(o any, at time.Time) { t.onPod(o.(*corev1.Pod), at) }, nil)
	go bench.Follow(ctx, c, &corev1.ServiceList{}, "bench", func(o any, at time.Time) { t.onService(o.(*corev1.Service), at) }, nil)
	go bench.Follow(ctx, c, &hourglassv1alpha1.PerformerList{}, "bench", func(o any, at time.Time) { t.onPerformer(o.(*hourglassv1alpha1.Performer), at) }, nil)
	time.Sleep(time.Second) // the watches open; nothing exists in the namespace yet
	cpuBefore := mustCPU(b, op)
	apiBefore := mustAPIServerCPU(b)
	load := loadavg()
	machine0 := mustMachine(b)

	b.StartTimer()
	t.start = time.Now()
	createAll(b, c, n)
	created := time.Since(t.start)
	limit := 10*time.Minute + time.Duration(n)*200*time.Millisecond
	wait(b, op, t.allServed, limit, "every Pod and Service", t.progress)
	served := time.Since(t.start)
	machineServed := mustMachine(b)
	saveHeap(b, "heap-served")
	wait(b, op, t.allPodReady, limit, "every Pod Ready", t.progress)
	podsReady := time.Since(t.start)
	wait(b, op, t.allReady, limit, "every Performer Ready", t.progress)
	ready := time.Since(t.start)
	b.StopTimer()
	machineReady := mustMachine(b)
	readyAt := time.Now()
	cpuReady := mustCPU(b, op) - cpuBefore
	apiReady := mustAPIServerCPU(b) - apiBefore
	saveHeap(b, "heap-ready")

	time.Sleep(idle) // the idle window: a reading of what the operator does with nothing to do
	op.alive(b)
	cpuIdle := mustCPU(b, op) - cpuBefore - cpuReady
	apiIdle := mustAPIServerCPU(b) - apiBefore - apiReady
	peak := op.PeakRSS()
	end := time.Now()
	// What the resident set is made of after the idle window: anonymous
	// memory (the Go heap and runtime) against the binary's own pages.
	anon, errAnon := op.Status("RssAnon")
	file, errFile := op.Status("RssFile")
	if errAnon == nil && errFile == nil {
		b.Logf("RSS after the idle window: anonymous %.1f MiB, file-backed (the binary's pages) %.1f MiB", float64(anon)/(1<<20), float64(file)/(1<<20))
	}
	saveHeap(b, "heap-idle")

	notReady := notReadyNodes(ctx, c, time.Since(t.start))
	everyone, err := readAudit(auditLog)
	if err != nil {
		b.Fatal(err)
	}
	reqs := byUser(everyone, operatorUser)
	toReady, _, _ := between(reqs, t.start, readyAt)
	_, idleWrites, idleKinds := between(reqs, readyAt, end)
	_, _, readyKinds := between(reqs, t.start, readyAt)
	perServed, perReady := writesPerPerformer(t, reqs)
	readsReady, directReady := reads(reqs, t.start, readyAt)
	readsIdle, directIdle := reads(reqs, readyAt, end)

	report(b, figures{
		n: n, workers: workers, idle: idle, load: load, created: created, served: served, podsReady: podsReady, ready: ready,
		p50: t.percentile(t.served, 50), p99: t.percentile(t.served, 99),
		readyP50: t.percentile(t.perf, 50), readyP99: t.percentile(t.perf, 99),
		requests: float64(toReady) / float64(n), writesServed: perServed, writesReady: perReady,
		idleWrites: idleWrites, idleKinds: idleKinds, readyKinds: readyKinds, idleBody: firstBody(reqs, readyAt, end), notReady: notReady,
		writers: writersBetween(everyone, t.start, readyAt),
		peakMiB: float64(peak) / (1 << 20), cpuReady: cpuReady, cpuIdle: cpuIdle,
		toServed: machineServed.Since(machine0), servedToReady: machineReady.Since(machineServed),
		readsReady: readsReady, directReady: directReady, readsIdle: readsIdle, directIdle: directIdle,
		apiReady: apiReady, apiIdle: apiIdle, build: build.name,
	})
}

// performerName finds the Performer a request was about from the object's
// name (Performer p00042, Service performer-p00042, Pod
// performer-p00042-<hash> or performer-p00042-<hash>-<x>, Event p00042.<x>).
var performerName = regexp.MustCompile(`p\d{5}`)

// writesPerPerformer attributes the operator's writes to the Performer
// each was about. To served: every write up to the moment its Pod and
// Service both existed, and the status write that reported them (the
// first after, unless one came before). To Ready: every write up to the moment it said Ready. A
// write naming no Performer (a Pod created by generateName, if the audit
// event carries no name) is shared out evenly.
func writesPerPerformer(t *tracker, reqs []request) (served, ready float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	per := map[string][]request{}
	var unnamedServed, unnamedReady int
	lastServed, lastReady := latest(t.served), latest(t.perf)
	for _, r := range reqs {
		if !r.write() || r.Received.Before(t.start) {
			continue
		}
		name := performerName.FindString(r.Object.Name)
		if name == "" {
			if !r.Received.After(lastServed) {
				unnamedServed++
			}
			if !r.Received.After(lastReady) {
				unnamedReady++
			}
			continue
		}
		per[name] = append(per[name], r)
	}
	var sumServed, sumReady int
	for name, rs := range per {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Received.Before(rs[j].Received) })
		// The tracker sees the Pod and Service through its own watch, a
		// moment after they exist; a status write that reported them can
		// come before that moment, and is then the one counted.
		reported := false
		for _, r := range rs {
			status := r.Object.Resource == "performers" && r.Object.Subresource == "status"
			if at, ok := t.served[name]; ok && !r.Received.After(at) {
				sumServed++
				reported = reported || status
			} else if ok && !reported && status {
				reported = true
				sumServed++
			}
			if at, ok := t.perf[name]; ok && !r.Received.After(at) {
				sumReady++
			}
		}
	}
	return float64(sumServed+unnamedServed) / float64(t.n), float64(sumReady+unnamedReady) / float64(t.n)
}

func latest(m map[string]time.Time) time.Time {
	var last time.Time
	for _, at := range m {
		if at.After(last) {
			last = at
		}
	}
	return last
}

type figures struct {
	n                                   int
	idle                                time.Duration
	load                                string
	created, served, podsReady, ready   time.Duration
	p50, p99, readyP50, readyP99        time.Duration
	requests, writesServed, writesReady float64
	idleWrites                          int
	idleKinds, readyKinds               map[string]int
	idleBody                            string
	workers                             string
	writers                             map[string]int
	notReady                            string
	peakMiB                             float64
	// build is the operator build measured (PERF_BUILD).
	build             string
	cpuReady, cpuIdle time.Duration
	// toServed and servedToReady are where the machine's cores went in
	// each stretch: the reading that says what bounds the times.
	toServed, servedToReady proc.Usage
	// readsReady and readsIdle count the operator's reads by class
	// (readClass), to Ready and while idle; directReady and directIdle
	// the direct ones by verb and resource.
	readsReady, directReady, readsIdle, directIdle map[string]int
	// apiReady and apiIdle are the CPU time of the benchmark's
	// kube-apiserver, to Ready and while idle.
	apiReady, apiIdle time.Duration
}

// hourglass is the Hourglass original's time to all served and all Ready,
// as the comparison measured it, by N; the aim is a fifth of each.
var hourglass = map[int][2]float64{200: {18.6, 27.3}, 1000: {99.3, 137.2}}

// timeAims are the aims for all served and all Ready at n Performers, with
// the original's figures they are a fifth of; none for an n the issue did
// not measure.
func timeAims(n int) (served, ready string) {
	o, ok := hourglass[n]
	if !ok {
		return "", ""
	}
	return fmt.Sprintf("≤ %.1f s (original %.1f s / 5)", o[0]/5, o[0]), fmt.Sprintf("≤ %.1f s (original %.1f s / 5)", o[1]/5, o[1])
}

// report prints the table with the aims beside the figures, and
// reports the figures as benchmark metrics.
func report(b *testing.B, f figures) {
	var sb strings.Builder
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	s := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	served, ready := timeAims(f.n)
	_, _ = fmt.Fprintf(w, "Performers, N=%d (load average before: %s)\tHyperFleet\taim\n", f.n, f.load)
	_, _ = fmt.Fprintf(w, "performer workers (PERF_WORKERS)\t%s\t\n", f.workers)
	_, _ = fmt.Fprintf(w, "all created (client, %d in flight)\t%s\t\n", creators, s(f.created))
	_, _ = fmt.Fprintf(w, "all served (Pod and Service exist)\t%s\t%s\n", s(f.served), served)
	_, _ = fmt.Fprintf(w, "served p50 / p99\t%s / %s\t\n", s(f.p50), s(f.p99))
	_, _ = fmt.Fprintf(w, "all Pods Ready (kwok's kubelet)\t%s\t\n", s(f.podsReady))
	_, _ = fmt.Fprintf(w, "all Performers Ready\t%s\t%s\n", s(f.ready), ready)
	_, _ = fmt.Fprintf(w, "Performer Ready p50 / p99\t%s / %s\t\n", s(f.readyP50), s(f.readyP99))
	_, _ = fmt.Fprintf(w, "API requests per performer, to Ready\t%.1f\t\n", f.requests)
	_, _ = fmt.Fprintf(w, "writes per performer, served / Ready\t%.1f / %.1f\t≤ 2 / ≤ 3\n", f.writesServed, f.writesReady)
	per := func(m map[string]int, verb string) float64 {
		sum := 0
		for k, v := range m {
			if strings.HasPrefix(k, verb+" ") {
				sum += v
			}
		}
		return float64(sum) / float64(f.n)
	}
	_, _ = fmt.Fprintf(w, "direct reads per performer (past the cache), GET / LIST, to Ready\t%.3f / %.3f\t0 / 0\n", per(f.directReady, "get"), per(f.directReady, "list"))
	_, _ = fmt.Fprintf(w, "cached-path reads to Ready: informer lists / watches ended\t%d / %d\t\n", f.readsReady[readInformerList], f.readsReady[readWatch])
	_, _ = fmt.Fprintf(w, "writes in %s idle\t%d\t0\n", f.idle, f.idleWrites)
	_, _ = fmt.Fprintf(w, "direct reads in %s idle\t%d\t0\n", f.idle, f.readsIdle[readDirect])
	_, _ = fmt.Fprintf(w, "peak RSS, %s build\t%.1f MiB\t%s\n", f.build, f.peakMiB, rssAim(f.build))
	_, _ = fmt.Fprintf(w, "CPU, to Ready / idle\t%.1f s / %.1f s\t\n", f.cpuReady.Seconds(), f.cpuIdle.Seconds())
	_, _ = fmt.Fprintf(w, "kube-apiserver CPU, to Ready / idle\t%.1f s / %.1f s\t\n", f.apiReady.Seconds(), f.apiIdle.Seconds())
	_ = w.Flush()
	sb.WriteString("writes to Ready by kind: " + kinds(f.readyKinds) + "\n")
	sb.WriteString("writes while idle by kind: " + kinds(f.idleKinds) + "\n")
	sb.WriteString("direct reads to Ready by kind: " + kinds(f.directReady) + "\n")
	sb.WriteString("direct reads while idle by kind: " + kinds(f.directIdle) + "\n")
	total := 0
	for _, n := range f.writers {
		total += n
	}
	fmt.Fprintf(&sb, "all writes the API server took to Ready: %d (%.0f a second), by user: %s\n",
		total, float64(total)/f.ready.Seconds(), kinds(f.writers))
	sb.WriteString("machine CPU to served: " + f.toServed.String() + "\n")
	sb.WriteString("machine CPU served → Ready: " + f.servedToReady.String() + "\n")
	if f.notReady != "" {
		// The node lifecycle controller marks a NotReady node's Pods not
		// Ready, and each Performer rightly follows: such idle writes are
		// the test cluster's, not the operator's.
		sb.WriteString("nodes not Ready, or Ready again, since the Performers were created: " + f.notReady + "\n")
	}
	if f.idleBody != "" {
		sb.WriteString("first idle status write: " + f.idleBody + "\n")
	}
	if f.idle != defaultIdle {
		fmt.Fprintf(&sb, "(idle window shortened to %s by PERF_IDLE; the issue's is %s)\n", f.idle, defaultIdle)
	}
	b.Log("\n" + sb.String())
	b.ReportMetric(f.served.Seconds(), "s-served")
	b.ReportMetric(f.ready.Seconds(), "s-ready")
	b.ReportMetric(f.writesServed, "writes/served")
	b.ReportMetric(f.writesReady, "writes/ready")
	b.ReportMetric(float64(f.idleWrites), "idle-writes")
	b.ReportMetric(f.peakMiB, "MiB-peak")
	b.ReportMetric(float64(f.readsReady[readDirect])/float64(f.n), "direct-reads/ready")
	b.ReportMetric(f.apiReady.Seconds(), "apiserver-cpu-s")
}

func kinds(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func newPerformer(ns, name string) *hourglassv1alpha1.Performer {
	return &hourglassv1alpha1.Performer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: hourglassv1alpha1.PerformerSpec{
			AVSAddress: "0x4444444444444444444444444444444444444444",
			Image:      "ghcr.io/example/avs-performer",
			Version:    "v1.0.0",
		},
	}
}

// createAll creates n Performers, creators requests in flight at a time.
func createAll(b *testing.B, c client.Client, n int) {
	b.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range creators {
		wg.Go(func() {
			for i := range next {
				if err := c.Create(context.Background(), newPerformer("bench", fmt.Sprintf("p%05d", i))); err != nil {
					mu.Lock()
					first = cmp(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// wait blocks until done closes, failing after limit or if the operator exits.
func wait(b *testing.B, op *operator, done <-chan struct{}, limit time.Duration, what string, progress func() string) {
	b.Helper()
	select {
	case <-done:
	case <-op.Done():
		op.alive(b)
	case <-time.After(limit):
		op.alive(b)
		log := op.Log()
		b.Fatalf("no %s within %s (%s); the operator's log ends:\n%s", what, limit, progress(), log[max(0, len(log)-4000):])
	}
}

// waitDefaultServiceAccount: the Pods need the namespace's default
// ServiceAccount, which the controller-manager makes a moment after the
// namespace.
func waitDefaultServiceAccount(b *testing.B, c client.Client, ns string) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("no default ServiceAccount in %s: %v", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mustAPIServerCPU is the CPU time the benchmark's kube-apiserver has used:
// the one started with this package's audit log (another kube-apiserver
// on the machine, a suite's, is not counted).
func mustAPIServerCPU(b *testing.B) time.Duration {
	b.Helper()
	pid, err := proc.PidWithArg("--audit-log-path=" + auditLog)
	if err != nil {
		b.Fatal(err)
	}
	d, err := proc.CPUOf(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func mustCPU(b *testing.B, op *operator) time.Duration {
	b.Helper()
	d, err := op.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// mustMachine snapshots the machine's CPU counters.
func mustMachine(b *testing.B) proc.Machine {
	b.Helper()
	m, err := proc.ReadMachine()
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// notReadyNodes names the nodes whose Ready condition is not True, or
// changed within window (a node that went NotReady and came back).
func notReadyNodes(ctx context.Context, c client.Client, window time.Duration) string {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return err.Error()
	}
	var out []string
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && (cond.Status != corev1.ConditionTrue || time.Since(cond.LastTransitionTime.Time) < window) {
				out = append(out, fmt.Sprintf("%s (%s %s since %s)", n.Name, cond.Status, cond.Reason, cond.LastTransitionTime.Format(time.TimeOnly)))
			}
		}
	}
	return strings.Join(out, ", ")
}

// loadavg is the machine's load over 1, 5 and 15 minutes, to read the
// figures by: the machine is shared.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
