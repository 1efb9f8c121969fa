// Package demandfailover shows that runner demand survives a failover: two
// real `hyperfleet run` processes with leader election, both receiving
// GitHub's webhook deliveries through one "Service" that spreads them over
// both, and the leader SIGKILLed in the middle of the burst. Every job must
// be served by exactly one runner, and no runner made for nothing.
package demandfailover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/replicas"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
)

const (
	operatorNamespace = "hyperfleet-system"
	workNamespace     = "ci"
	webhookSecret     = "failover-s3cret"
	repo              = "acme/widgets"
	// jobs queued in the burst: each makes three deliveries (queued,
	// in_progress, completed).
	jobs = 100
	// killAfter: the leader is killed once this many deliveries were sent.
	killAfter = 120
	runnerVM  = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","spec":{"template":{"spec":{"domain":{"devices":{}},
"volumes":[{"name":"root","containerDisk":{"image":"ghcr.io/example/runner-image:2.321.0"}}]}}}}`
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m)
}

func TestDemandSurvivesLeaderKilledMidBurst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := testenv.Client()
	r := startRig(t, ctx)
	bin, kubeconfig, dir, kv := r.bin, r.kubeconfig, r.dir, r.kv

	// The "Service": one address, spreading deliveries over both replicas.
	svc := &service{}
	svcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: svc, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(svcLn) }()
	t.Cleanup(func() { _ = srv.Close() })

	gh := githubsim.New(githubsim.Options{Repositories: []string{repo}, JobDuration: 300 * time.Millisecond,
		WebhookURL: "http://" + svcLn.Addr().String() + "/github/webhook", WebhookSecret: webhookSecret})
	if err := gh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	setup(t, ctx, c, gh)

	ops := startOperators(t, bin, kubeconfig, dir, svc)
	agents := &runnersim.Agents{Client: c, GitHub: gh, Namespace: workNamespace, Log: logr.Discard(),
		PowerOff: func(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) error {
			return kv.GuestShutdown(claim.Namespace, claim.Status.MachineName)
		}}
	agents.Start(ctx)
	claims := watchClaims(t, ctx)

	eventually.That(t, 2*time.Minute, func() (bool, string) {
		p := &hypervisorv1alpha1.RunnerPool{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: workNamespace, Name: "pool"}, p); err != nil {
			return false, err.Error()
		}
		return apimeta.IsStatusConditionTrue(p.Status.Conditions, meta.ReadyCondition), fmt.Sprintf("pool %+v", p.Status.Conditions)
	})
	leader := holder(ctx)
	if leader == "" {
		t.Fatal("no leader")
	}

	// The burst: jobs queued as fast as githubsim takes them; their
	// deliveries go out one after another, over both replicas.
	ids := make([]int64, 0, jobs)
	for range jobs {
		id, err := gh.QueueJob(repo, []string{"self-hosted", "failover"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		n := sent(gh)
		return n >= killAfter, fmt.Sprintf("%d deliveries sent", n)
	})
	if _, err := ops.Kill(leader); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	eventually.That(t, time.Minute, func() (bool, string) {
		h := holder(ctx)
		return h != "" && h != leader, "lease held by " + h
	})
	failover := time.Since(killedAt)

	// Deliveries that reached the killed process and got no answer are
	// GitHub's to redeliver, as an operator does from "Recent Deliveries".
	redelivered := 0
	done := func() (bool, string) {
		redelivered += redeliverFailed(gh)
		served := 0
		for _, id := range ids {
			if j, ok := gh.Job(id); ok && j.Status == githubsim.JobCompleted {
				served++
			}
		}
		return served == jobs, fmt.Sprintf("%d of %d jobs served; %d claims made", served, jobs, claims.count())
	}
	eventually.That(t, 3*time.Minute, done)

	// Exactly one runner per job: every job ran on a runner of the pool,
	// no runner ran two, and no runner was made that took no job.
	byRunner := map[string]int{}
	for _, id := range ids {
		j, _ := gh.Job(id)
		if !strings.HasPrefix(j.RunnerName, "pool-") {
			t.Errorf("job %d ran on %q", id, j.RunnerName)
		}
		byRunner[j.RunnerName]++
	}
	duplicates := 0
	for name, n := range byRunner {
		if n > 1 {
			duplicates++
			t.Errorf("runner %s ran %d jobs", name, n)
		}
	}
	made := claims.names()
	idle := 0
	for _, name := range made {
		if byRunner[name] == 0 {
			idle++
		}
	}
	deliveries := gh.Deliveries()
	ok2xx := 0
	for _, d := range deliveries {
		if d.StatusCode/100 == 2 {
			ok2xx++
		}
	}
	t.Logf("demand failover: %d deliveries (%d answered 2xx, %d redelivered), 2 replicas, 1 kill (failover %s), %d jobs, %d runners made, %d made for no job, %d duplicates; per replica %v",
		len(deliveries), ok2xx, redelivered, failover.Round(100*time.Millisecond), jobs, len(made), idle, duplicates, svc.counts())
	if idle > 0 {
		t.Errorf("%d runners were made that took no job: scale-up counted a job twice", idle)
		for _, name := range made {
			if byRunner[name] == 0 {
				t.Logf("made for no job: %s", lagAt(gh, ids, claims.madeAt(name), killedAt))
			}
		}
	}
	if exits := ops.UnexpectedExits(); len(exits) > 0 {
		t.Errorf("replicas exited on their own: %v", exits)
	}
}

// redeliverFailed redelivers each delivery whose every attempt so far
// failed, once its last attempt is over, and returns how many it sent.
func redeliverFailed(gh *githubsim.Server) int {
	type state struct {
		ok, pending bool
		last        int64
	}
	byGUID := map[string]*state{}
	for _, d := range gh.Deliveries() {
		st := byGUID[d.GUID]
		if st == nil {
			st = &state{}
			byGUID[d.GUID] = st
		}
		st.ok = st.ok || d.StatusCode/100 == 2
		st.pending = st.pending || !d.Attempted
		st.last = d.ID
	}
	n := 0
	for _, st := range byGUID {
		if !st.ok && !st.pending {
			if _, err := gh.Redeliver(st.last); err == nil {
				n++
			}
		}
	}
	return n
}

func sent(gh *githubsim.Server) int {
	n := 0
	for _, d := range gh.Deliveries() {
		if d.Attempted {
			n++
		}
	}
	return n
}

// setup makes the namespaces, the Secrets, the KubeVirt cluster, the runner
// template and the pool.
func setup(t *testing.T, ctx context.Context, c client.Client, gh *githubsim.Server) {
	t.Helper()
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "github-webhook", Namespace: operatorNamespace, Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"webhookSecret": webhookSecret}},
	}
	objs = append(objs, runnerObjects(workNamespace, gh, func(spec *hypervisorv1alpha1.RunnerPoolSpec) {
		spec.Labels = []string{"failover"}
		// Only deliveries (and their redeliveries) feed the pool here: the
		// poll would hide a lost record.
		spec.WebhookScaling = &hypervisorv1alpha1.WebhookScaling{PollInterval: &metav1.Duration{}}
	})...)
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// service spreads requests over its backends round-robin, as a Service
// over every ready Pod does; a backend that refuses the connection (its
// process is gone) is skipped, as an endpoint removed from the Service.
type service struct {
	mu       sync.Mutex
	backends []*backend
	next     int
}

type backend struct {
	addr     string
	answered atomic.Int64
}

func (s *service) add(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backends = append(s.backends, &backend{addr: addr})
}

func (s *service) counts() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int64{}
	for _, b := range s.backends {
		out[b.addr] = b.answered.Load()
	}
	return out
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	order := make([]*backend, 0, len(s.backends))
	for i := range s.backends {
		order = append(order, s.backends[(s.next+i)%len(s.backends)])
	}
	s.next++
	s.mu.Unlock()
	for _, b := range order {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://"+b.addr+r.URL.Path, bytes.NewReader(body))
		req.Header = r.Header.Clone()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue // not listening: the next endpoint
			}
			http.Error(w, err.Error(), http.StatusBadGateway) // died mid-request: GitHub sees a failure
			return
		}
		b.answered.Add(1)
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
		_ = res.Body.Close()
		return
	}
	http.Error(w, "no endpoint", http.StatusServiceUnavailable)
}

// startOperators runs the two replicas through internal/testenv/replicas,
// each slot on its own webhook address, which a restarted incarnation
// keeps, as a Pod's restarted container keeps the Pod's address.
func startOperators(t *testing.T, bin, kubeconfig, logDir string, svc *service) *replicas.Set {
	t.Helper()
	addrs := map[string]string{"a": freeAddr(t), "b": freeAddr(t)}
	for _, addr := range addrs {
		svc.add(addr)
	}
	return replicas.Start(t, replicas.Spec{
		Prefix: "failover", LogDir: logDir,
		Command: func(slot, _ string) *exec.Cmd {
			return exec.Command(bin, "run", "--kubeconfig", kubeconfig,
				"--leader-elect=true", "--leader-election-namespace", operatorNamespace,
				"--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "500ms",
				"--operator-namespace", operatorNamespace, "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
				"--controllers", "hypervisorcluster,hypervisormachinetemplate,machineclaim,runnerpool",
				"--webhook-bind-address", addrs[slot], "--webhook-secret", "github-webhook", "--runnerpool-sync-interval", "1s")
		},
	}, "a", "b")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// holder is the Lease's holder; "" when none.
func holder(ctx context.Context) string {
	h, err := replicas.LeaseHolder(ctx, testenv.Client(), operatorNamespace, "hyperfleet-leader")
	if err != nil {
		return ""
	}
	return h
}

// claimLog is every runner MachineClaim made in the run, from a watch, so
// claims already deleted are counted too.
type claimLog struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (l *claimLog) madeAt(name string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[name]
}

func (l *claimLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *claimLog) names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.seen))
	for n := range l.seen {
		out = append(out, n)
	}
	return out
}

func watchClaims(t *testing.T, ctx context.Context) *claimLog {
	t.Helper()
	wc, err := client.NewWithWatch(testenv.Config(), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &hypervisorv1alpha1.MachineClaimList{}, client.InNamespace(workNamespace), client.HasLabels{runnerpool.PoolLabel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	l := &claimLog{seen: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			if c, ok := ev.Object.(*hypervisorv1alpha1.MachineClaim); ok {
				l.mu.Lock()
				l.seen[c.Name] = time.Now()
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// lagAt describes, at the moment a runner was made, how far the recorded
// demand trailed GitHub: jobs still waiting for a runner, and jobs a
// runner had taken (or finished) whose delivery saying so was not answered
// yet. It is printed for each runner made for no job.
func lagAt(gh *githubsim.Server, ids []int64, at, killedAt time.Time) string {
	answered := map[string]time.Time{}
	for _, d := range gh.Deliveries() {
		if d.StatusCode/100 == 2 {
			key := fmt.Sprintf("%d/%s", d.JobID, d.Action)
			if prev, ok := answered[key]; !ok || d.DeliveredAt.Before(prev) {
				answered[key] = d.DeliveredAt
			}
		}
	}
	before := func(key string) bool { t, ok := answered[key]; return ok && !t.After(at) }
	waiting, startedUnrecorded, doneUnrecorded := 0, 0, 0
	for _, id := range ids {
		j, _ := gh.Job(id)
		switch {
		case j.StartedAt.IsZero() || j.StartedAt.After(at):
			if !j.CreatedAt.After(at) {
				waiting++
			}
		case j.CompletedAt.IsZero() || j.CompletedAt.After(at):
			if !before(fmt.Sprintf("%d/in_progress", id)) {
				startedUnrecorded++
			}
		default:
			if !before(fmt.Sprintf("%d/completed", id)) && !before(fmt.Sprintf("%d/in_progress", id)) {
				doneUnrecorded++
			}
		}
	}
	return fmt.Sprintf("made %s after the kill; then %d jobs waited for a runner, %d had started and %d finished with no in_progress or completed answered",
		at.Sub(killedAt).Round(100*time.Millisecond), waiting, startedUnrecorded, doneUnrecorded)
}

// rig is what both failover tests run on: the operator's binary, a
// kubeconfig for it, a directory for its logs and KubeVirt's simulator.
type rig struct {
	bin, kubeconfig, dir string
	kv                   *kubevirtsim.Simulator
}

func startRig(t *testing.T, ctx context.Context) rig {
	t.Helper()
	dir := t.TempDir()
	bin, err := testenv.BuildOperator(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc, err := testenv.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kubevirtsim.Install(ctx, testenv.Config()); err != nil {
		t.Fatal(err)
	}
	kv, err := kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kv.Stop)
	return rig{bin: bin, kubeconfig: kubeconfig, dir: dir, kv: kv}
}

// runnerObjects are a namespace's GitHub token Secret, KubeVirt cluster,
// runner template and the RunnerPool "pool", as mutate finishes its spec.
func runnerObjects(ns string, gh *githubsim.Server, mutate func(*hypervisorv1alpha1.RunnerPoolSpec)) []client.Object {
	owner, name, _ := strings.Cut(repo, "/")
	pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: hypervisorv1alpha1.RunnerPoolSpec{
			TemplateRef: meta.LocalObjectReference{Name: "runner"},
			GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: owner, Repository: name,
				CredentialsRef: meta.LocalObjectReference{Name: "github-pat"}, APIURL: gh.URL() + "/"},
			MinReplicas: 0, MaxReplicas: 40,
			IdleTTL: &metav1.Duration{Duration: 10 * time.Minute},
		}}
	mutate(&pool.Spec)
	return []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "github-pat", Namespace: ns, Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"token": gh.PAT()}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: ns},
			Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: ns},
			Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{ClusterRef: meta.LocalObjectReference{Name: "kv"},
				KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(runnerVM)}}}},
		pool,
	}
}
