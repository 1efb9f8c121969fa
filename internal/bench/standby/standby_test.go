package standby

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/bench/percentile"
	"github.com/hyperfleet/hyperfleet/internal/bench/proc"
	"github.com/hyperfleet/hyperfleet/internal/bench/runnerlab"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/sim/spirefake"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

const (
	trustDomain  = "bench.example"
	installation = "bench"
	// jobDuration is how long each job runs once a runner takes it.
	jobDuration = 2 * time.Second
)

var (
	lab      *runnerlab.Lab
	spireSrv = spirefake.NewServer(trustDomain)
	// sims maps a scenario's namespace to its Proxmox simulator, for the
	// stand-in machines: the ISO a guest booted with, the VM to power off.
	sims sync.Map
)

// latencies are a small Proxmox cluster's as its users report them: a
// linked clone in seconds, a boot (firmware, kernel, cloud-init, the guest
// agent reporting an address) in 20-40 s.
func latencies() proxmoxsim.Latencies {
	lat := proxmoxsim.Realistic()
	lat.Clone, lat.Start, lat.Boot = 3*time.Second, time.Second, 25*time.Second
	return lat
}

// The runner lab (internal/bench/runnerlab) on Proxmox: the manager with
// production settings and attestation on an in-memory SPIRE server
// (spirefake), githubsim delivering webhooks, and stand-in machines that
// read their user data from the ISO they booted with and, in place of a
// spire-agent, present an SVID minted for the machine's SPIFFE ID
// (runnersim.Minter) to the real credential endpoint.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		addr, err := proc.FreeAddress()
		if err != nil {
			return nil, err
		}
		l, stop, err := runnerlab.Start(context.Background(), runnerlab.Options{
			Config: testenv.Config(), Client: testenv.Client(), WebhookSecret: "bench-s3cret",
			RateLimit: 15000, DeliveryConcurrency: 16, JobDuration: jobDuration,
			Manager: func(o *manager.Options) {
				o.InstallationID = installation
				o.Attestation = manager.AttestationOptions{AdminSocket: "/run/spire/admin.sock", TrustDomain: trustDomain,
					EndpointAddr: addr, EndpointURL: "https://" + addr,
					Dial: func(_, _, inst string) (spire.Server, error) { return spireSrv.Client(inst), nil }}
			},
			Agents: func(_ *runnerlab.Lab, a *runnersim.Agents) {
				a.UserData = guestUserData
				a.PowerOff = guestPowerOff
				a.Mint = runnersim.MinterFrom(spireSrv.Client(installation))
			},
		})
		if err != nil {
			return nil, err
		}
		lab = l
		return stop, nil
	})
}

func simOf(c *hypervisorv1alpha1.MachineClaim) (*proxmoxsim.Server, int, error) {
	v, ok := sims.Load(c.Namespace)
	if !ok || c.Status.VMID == nil {
		return nil, 0, fmt.Errorf("claim %s/%s has no VM on a scenario's simulator", c.Namespace, c.Name)
	}
	return v.(*proxmoxsim.Server), int(*c.Status.VMID), nil
}

func guestUserData(_ context.Context, c *hypervisorv1alpha1.MachineClaim) (string, error) {
	sim, vmid, err := simOf(c)
	if err != nil {
		return "", err
	}
	seed, ok := sim.SeedAtBoot(vmid)
	if !ok {
		return "", fmt.Errorf("VM %d booted without a NoCloud ISO", vmid)
	}
	return runnersim.NoCloudUserData(seed)
}

func guestPowerOff(_ context.Context, c *hypervisorv1alpha1.MachineClaim) error {
	sim, vmid, err := simOf(c)
	if err != nil {
		return err
	}
	sim.GuestShutdown(vmid)
	return nil
}

// sizes are STANDBY_N, the bursts measured (10,100).
func sizes(b *testing.B) []int {
	v := os.Getenv("STANDBY_N")
	if v == "" {
		return []int{10, 100}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("STANDBY_N=%q is not a list of positive numbers", v)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkJobStart queues a burst of N jobs at once at a pool of runners
// on Proxmox (proxmoxsim at latencies()) and prints the time from each
// job queued to a runner starting it, p50 and p99: cold (every runner is
// cloned and booted), with warm standby machines covering the burst
// (spec.standby.warm = N: cloned and powered off; each runner configures
// and boots one) and with hot ones (spec.standby.hot = N: booted and
// attested; each runner takes one running); and what the standby machines
// cost, in idle machine-minutes per job served:
//
//	go test -run '^$' -bench JobStart -benchtime 1x -timeout 30m -v ./internal/bench/standby/
//
// The aim, with hot machines covering the burst: p99 under 3 s at 10 jobs
// and under 10 s at 100.
func BenchmarkJobStart(b *testing.B) {
	for _, n := range sizes(b) {
		for _, mode := range []string{cold, warm, hot} {
			name := fmt.Sprintf("jobs=%d/%s", n, mode)
			if mode != cold {
				name = fmt.Sprintf("jobs=%d/%s=%d", n, mode, n)
			}
			b.Run(name, func(b *testing.B) {
				for range b.N {
					burst(b, n, mode)
				}
			})
		}
	}
}

// The scenarios: no standby machines, warm ones, hot ones.
const (
	cold = "cold"
	warm = "warm"
	hot  = "hot"
)

func burst(b *testing.B, n int, mode string) {
	b.StopTimer()
	ctx := context.Background()
	ns := testenv.Namespace(b)
	// Its own label: no runner of another scenario takes its jobs.
	pool := fmt.Sprintf("%s%d", mode, n)
	prepare(b, ns, pool, n, mode)
	c := testenv.Client()
	gh := lab.GitHub

	var readyAt time.Time
	if mode != cold {
		eventually.That(b, 15*time.Minute, func() (bool, string) {
			t := &hypervisorv1alpha1.HypervisorMachineTemplate{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "runner"}, t); err != nil {
				return false, err.Error()
			}
			st := t.Status.Standby
			kept := st != nil && (mode == hot && int(st.Hot) == n || mode == warm && int(st.Warm) == n)
			return kept, fmt.Sprintf("standby %+v; %s; %s", st, describeStandby(ctx, ns), machineErrors())
		})
		readyAt = time.Now()
	}
	idleBefore, bindsBefore, missesBefore := idleSeconds(b), binds(b), misses(b)
	cpuBefore, errCPU := proc.ReadMachine()
	requestsBefore := apiRequests(b)
	stopProfile := profileCPU(b, fmt.Sprintf("%s-%d", mode, n))
	b.StartTimer()
	ids := map[int64]bool{}
	for range n {
		id, err := gh.QueueJobSpec(githubsim.JobSpec{Repo: runnerlab.Repo, Labels: []string{"self-hosted", pool}, Duration: jobDuration})
		if err != nil {
			b.Fatal(err)
		}
		ids[id] = true
	}
	var waits []time.Duration
	eventually.That(b, 20*time.Minute, func() (bool, string) {
		waits = waits[:0]
		for _, j := range gh.Jobs() {
			if ids[j.ID] && !j.StartedAt.IsZero() {
				waits = append(waits, j.StartedAt.Sub(j.CreatedAt))
			}
		}
		return len(waits) == n, fmt.Sprintf("%d of %d jobs started; %s", len(waits), n, machineErrors())
	})
	b.StopTimer()
	stopProfile()
	idle := idleSeconds(b) - idleBefore
	took := int(binds(b) - bindsBefore)
	slices.Sort(waits)
	label := mode
	if mode != cold {
		label = fmt.Sprintf("%s=%d", mode, n)
	}
	fmt.Printf("\n%d jobs, %s (clone %s, boot %s): queued → started p50 %s, p99 %s, max %s; %d runners took a standby machine\n",
		n, label, latencies().Clone, latencies().Boot, pct(waits, 50), pct(waits, 99), pct(waits, 100), took)
	if mode != cold {
		keep := "kept hot, each costs 60 machine-minutes per hour"
		if mode == warm {
			keep = "kept warm, each holds its disk, and no CPU or memory"
		}
		fmt.Printf("  standby cost: %.2f idle machine-minutes per job served (the %s machines waited %.0f machine-seconds from Ready to taken; %s from all %d %s to the last job started); %s\n",
			idle/60/float64(n), mode, idle, time.Since(readyAt).Round(time.Second), n, mode, keep)
	}
	fmt.Printf("  %d claims fitted and found no standby machine free; %s\n", int(misses(b)-missesBefore), machineErrors())
	if misses(b) > missesBefore || len(lab.Agents().Errors()) > 0 {
		fmt.Printf("  what the operator said, by reason (Warning events with their last message): %s\n", eventsIn(ctx, b, ns))
	}
	fmt.Printf("  API server requests, queued → last started: %s\n", requestsSince(apiRequests(b), requestsBefore))
	if cpuAfter, err := proc.ReadMachine(); errCPU == nil && err == nil {
		fmt.Printf("  machine CPU, queued → last started: %s\n", cpuAfter.Since(cpuBefore))
	}
	b.ReportMetric(percentile.Millis(percentile.Of(waits, 50)), "start-p50-ms")
	b.ReportMetric(percentile.Millis(percentile.Of(waits, 99)), "start-p99-ms")
	b.ReportMetric(idle/60/float64(n), "idle-machine-min/job")
	b.ReportMetric(0, "ns/op")
	// The scenario's pool and template go, so nothing more is made in its
	// namespace; its simulator stays up for the claims still going away.
	for _, o := range []client.Object{
		&hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pool}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner"}},
	} {
		if err := c.Delete(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
}

// prepare makes the scenario's namespace: a Proxmox simulator and its
// cluster, an attesting runner template keeping the mode's standby machines, the
// GitHub credentials and a pool of n runners at most, none kept idle.
func prepare(b *testing.B, ns, pool string, n int, mode string) {
	b.Helper()
	gib := uint64(1) << 30
	nodes := []proxmoxsim.Node{{Name: "pve1", CPUs: 64, Memory: 512 * gib}, {Name: "pve2", CPUs: 64, Memory: 512 * gib}}
	sim := proxmoxsim.New(proxmoxsim.Options{Latencies: latencies(), Nodes: nodes, ErrorLog: log.New(io.Discard, "", 0)})
	if err := sim.Start(); err != nil {
		b.Fatal(err)
	}
	sims.Store(ns, sim)
	sim.AddTemplate("pve1", hypervisorlab.TemplateVMID, "runner-image", map[string]string{"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio,bridge=vmbr0"})
	tokenID, secret := sim.APIToken()
	creds := map[string]string{meta.CredentialsLabel: "true"}
	vmid := int32(hypervisorlab.TemplateVMID)
	owner, repo, _ := strings.Cut(runnerlab.Repo, "/")
	mem := resource.MustParse("1Gi")
	var standbySpec *hypervisorv1alpha1.StandbySpec
	switch mode {
	case hot:
		standbySpec = &hypervisorv1alpha1.StandbySpec{Hot: int32(n)}
	case warm:
		standbySpec = &hypervisorv1alpha1.StandbySpec{Warm: int32(n)}
	}
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Labels: creds}, StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Labels: creds}, Data: map[string][]byte{"ca.crt": sim.CACertPEM()}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "github-pat", Labels: creds}, StringData: map[string]string{"token": lab.GitHub.PAT()}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}, Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderProxmox, Endpoint: sim.URL(), CredentialsRef: &meta.LocalObjectReference{Name: "pve-token"},
			TLS: &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "pve-ca", Key: "ca.crt"}},
			// A linked clone holds its node and storage only briefly: the
			// limits are raised from the defaults (2, 4) as a cluster
			// serving bursts of runners would.
			Proxmox: &hypervisorv1alpha1.ProxmoxClusterSpec{DefaultBridge: "vmbr0", MaxConcurrentClonesPerNode: 8, MaxConcurrentClonesPerStorage: 16},
		}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "runner"}, Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Resources:  &hypervisorv1alpha1.MachineResources{CPUCores: 1, Memory: &mem},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}, CloneMode: hypervisorv1alpha1.CloneLinked},
			Workload: &hypervisorv1alpha1.WorkloadConfig{Type: hypervisorv1alpha1.WorkloadGitHubRunner,
				GitHubRunner: &hypervisorv1alpha1.GitHubRunnerWorkload{}},
			Attestation: &hypervisorv1alpha1.AttestationConfig{Method: hypervisorv1alpha1.AttestationJoinToken,
				SPIRE: &hypervisorv1alpha1.SPIREConfig{ServerAddress: "spire.bench.example:8081", TrustDomain: trustDomain}},
			Standby: standbySpec,
		}},
		&hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: pool}, Spec: hypervisorv1alpha1.RunnerPoolSpec{
			TemplateRef: meta.LocalObjectReference{Name: "runner"},
			GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: owner, Repository: repo,
				CredentialsRef: meta.LocalObjectReference{Name: "github-pat"}, APIURL: lab.GitHub.URL() + "/"},
			Labels: []string{pool}, MinReplicas: 0, MaxReplicas: int32(n),
		}},
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		if err := testenv.Client().Create(context.Background(), o); err != nil {
			b.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// misses is hyperfleet_standby_misses_total on Proxmox.
func misses(b *testing.B) float64 {
	b.Helper()
	v, _ := hypervisorlab.MetricValue(b, "hyperfleet_standby_misses_total", map[string]string{"provider": "proxmox"})
	return v
}

// binds is hyperfleet_standby_binds_total on Proxmox.
func binds(b *testing.B) float64 {
	b.Helper()
	v, _ := hypervisorlab.MetricValue(b, "hyperfleet_standby_binds_total", map[string]string{"provider": "proxmox"})
	return v
}

// idleSeconds is hyperfleet_standby_idle_machine_seconds_total of taken machines.
func idleSeconds(b *testing.B) float64 {
	b.Helper()
	v, _ := hypervisorlab.MetricValue(b, "hyperfleet_standby_idle_machine_seconds_total", map[string]string{"outcome": standby.OutcomeTaken})
	return v
}

func pct(d []time.Duration, p int) string {
	return percentile.Of(d, p).Round(10 * time.Millisecond).String()
}

// describeStandby says where the namespace's standby claims are.
func describeStandby(ctx context.Context, ns string) string {
	var list hypervisorv1alpha1.MachineClaimList
	if err := testenv.Client().List(ctx, &list, client.InNamespace(ns), client.HasLabels{standby.TemplateLabel}); err != nil {
		return err.Error()
	}
	count := map[string]int{}
	for _, c := range list.Items {
		att := "none"
		if c.Status.Attestation != nil {
			att = string(c.Status.Attestation.Phase)
		}
		count[fmt.Sprintf("%s/%s", c.Status.Phase, att)]++
	}
	return fmt.Sprintf("standby claims by phase/attestation: %v", count)
}

// machineErrors says what the stand-in machines failed at, the last few.
// A machine of an earlier scenario, deleted as it went, may fail; so it is
// reported, not waited on.
func machineErrors() string {
	errs := lab.Agents().Errors()
	return fmt.Sprintf("%d machine errors, the last: %v", len(errs), errs[max(len(errs)-3, 0):])
}

// profileCPU writes a CPU profile of the benchmark's process (the manager,
// the simulators and the stand-in machines; not the API server) from the
// jobs queued to the last started, as STANDBY_CPUPROFILE/<name>.pprof,
// when STANDBY_CPUPROFILE names a directory: where the burst's time goes.
// It returns what stops the profile.
func profileCPU(b *testing.B, name string) func() {
	dir := os.Getenv("STANDBY_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

// apiRequests reads the API server's apiserver_request_total: how many
// requests it served, by verb and resource, and how many it answered 409.
func apiRequests(b *testing.B) map[string]float64 {
	b.Helper()
	rc, err := rest.RESTClientFor(restConfig())
	if err != nil {
		b.Fatal(err)
	}
	body, err := rc.Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
		if l["code"] == "409" {
			out["409 answers"] += m.GetCounter().GetValue()
		}
	}
	return out
}

func restConfig() *rest.Config {
	cfg := testenv.Config()
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return cfg
}

// requestsSince reads "PATCH machineclaims 300, …", the requests served
// after before, the most first.
func requestsSince(now, before map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var d []kv
	total := 0.0
	for k, v := range now {
		if n := v - before[k]; n > 0 {
			d = append(d, kv{k, n})
			if k != "409 answers" {
				total += n
			}
		}
	}
	slices.SortFunc(d, func(a, b kv) int { return cmp.Or(cmp.Compare(b.v, a.v), strings.Compare(a.k, b.k)) })
	parts := []string{fmt.Sprintf("%.0f in all", total)}
	for _, e := range d {
		parts = append(parts, fmt.Sprintf("%s %.0f", e.k, e.v))
	}
	return strings.Join(parts, ", ")
}

// eventsIn reads the events of namespace ns counted by object kind and
// reason, with the last message of each Warning: what went wrong in a
// burst that missed.
func eventsIn(ctx context.Context, b *testing.B, ns string) string {
	b.Helper()
	var list eventsv1.EventList
	if err := testenv.Client().List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	counts, last := map[string]int{}, map[string]string{}
	for _, e := range list.Items {
		key := e.Regarding.Kind + "/" + e.Reason
		n := 1
		if e.Series != nil {
			n = max(1, int(e.Series.Count))
		}
		counts[key] += n
		if e.Type == corev1.EventTypeWarning {
			last[key] = e.Regarding.Name + ": " + e.Note
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		part := fmt.Sprintf("%s %d", k, counts[k])
		if m, ok := last[k]; ok {
			part += fmt.Sprintf(" (%q)", m)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}
