package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// The simulated cluster and the limits the operator is given for it.
const (
	templateVMID = 9000
	// nodes is how many Proxmox nodes the simulator has.
	nodes = 2
	// sharedStorage holds the template and receives the full clones. It is
	// shared (Ceph RBD) because Proxmox clones to another node only from and
	// to shared storage ("can't clone VM to node … (VM uses local storage)",
	// "can't clone to non-shared storage"), and the simulator refuses the
	// same; with the template on local-lvm every clone would have to stay on
	// the template's node.
	sharedStorage = "ceph"
	// clonesPerNode is the cluster's maxConcurrentClonesPerNode.
	clonesPerNode = 4
	// clonesPerStorage is the cluster's maxConcurrentClonesPerStorage. A
	// shared storage is one pool (and one lock) for the whole cluster, so it
	// caps all clones together: 8 = nodes × clonesPerNode, so neither limit
	// hides the other.
	clonesPerStorage = 8
	// storageLockLimit is the simulator's StorageLockLimit: how many clones
	// may hold the storage's lock before Proxmox's lock timeout fails the
	// excess. It equals clonesPerStorage so that the operator's admission,
	// not the simulator, is what queues a burst; with the simulator's default
	// of 3 an operator allowed 8 clones would see clones fail.
	storageLockLimit = clonesPerStorage
	// templateDiskGiB and claimDiskGiB make every claim grow its disk, as
	// most real templates (small cloud images) need.
	templateDiskGiB = 10
	claimDiskGiB    = 20
	// configSteps is how many synchronous config updates (PUT …/config,
	// Latencies.Config each) one claim needs: size, network and cloud-init;
	// the ownership tags; the "started" tag before power-on (see
	// providers/proxmox.Provider.Create).
	configSteps = 3
	// creators is how many goroutines create the claims.
	creators = 8
)

// pollEvery paces the teardown's reads of n claims (the time to Ready
// comes from a watch, readyWatch): seldom enough that listing them — 5 MB of
// JSON for 1000 claims, decoded from etcd and encoded by the API server on
// the same two cores — does not load the control plane the operator is
// measured against.
func pollEvery(n int) time.Duration {
	return max(500*time.Millisecond, time.Duration(n)*5*time.Millisecond)
}

// BenchmarkClaimsToReady creates N MachineClaims at once and measures how
// long they take to become Ready, and what they cost the API server and
// Proxmox. Run it once per size (`make bench`); the 1000-claim run takes
// longer than go test's default 10-minute timeout:
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 90m ./internal/bench/
//
// One size alone: -bench '/claims=100$' (a pattern without the slash is
// matched against the top-level name and selects nothing).
func BenchmarkClaimsToReady(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			for range b.N {
				claimsToReady(b, n)
			}
		})
	}
}

// readyTimeout bounds the wait for all n claims: generous, since only
// errors fail the benchmark, never slowness. The claims keep the default
// spec.provisioningTimeout (15 minutes): the aim is that 1000 claims
// pass under it, so a claim it fails fails the run.
func readyTimeout(n int) time.Duration {
	return 5*time.Minute + time.Duration(n)*2400*time.Millisecond
}

func claimsToReady(b *testing.B, n int) {
	b.StopTimer()
	l := newLab(b)
	defer l.teardown(n)
	l.waitReady(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}})
	l.waitReady(&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}})

	ctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	w, err := watchClaims(ctx, l.ns)
	if err != nil {
		b.Fatal(err)
	}
	apiRequests.reset()
	l.sim.ResetStats()
	start := time.Now()
	b.StartTimer()
	l.createClaims(n)
	created := time.Since(start)
	claims, last := l.waitAllReady(w, n, readyTimeout(n), start)
	wall := last.Sub(start)
	b.StopTimer()
	requests := apiRequests.snapshot()
	pveRequests := l.sim.Stats()

	l.report(n, claims, wall, created, requests, pveRequests, start)
}

// lab is one benchmark run's Proxmox: a simulator, its cluster and template.
type lab struct {
	b   *testing.B
	ns  string
	sim *proxmoxsim.Server
	lat proxmoxsim.Latencies
	c   client.Client
	// writesToReady is what report counted per claim, for teardown to
	// print the lifecycle's sum.
	writesToReady float64
}

func newLab(b *testing.B) *lab {
	b.Helper()
	lat := proxmoxsim.Realistic()
	sim := proxmoxsim.New(proxmoxsim.Options{
		// Room for 1000 running 1-GiB VMs, so placement by free memory
		// spreads them instead of finding both nodes full.
		Nodes: []proxmoxsim.Node{
			{Name: "pve1", CPUs: 128, Memory: 1 << 40},
			{Name: "pve2", CPUs: 128, Memory: 1 << 40},
		},
		Storages: []proxmoxsim.Storage{
			{Name: "local", Type: "dir", Content: []string{"iso", "vztmpl", "snippets", "backup"}},
			{Name: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
			{Name: sharedStorage, Type: "rbd", Content: []string{"images", "rootdir"}, Shared: true, Capacity: 64 << 40},
		},
		Latencies:        lat,
		StorageLockLimit: storageLockLimit,
		ErrorLog:         log.New(io.Discard, "", 0),
	})
	if err := sim.Start(); err != nil {
		b.Fatal(err)
	}
	// teardown closes it too; this covers a failure before teardown is due.
	b.Cleanup(sim.Close)
	sim.AddTemplate("pve1", templateVMID, "ubuntu-24.04", map[string]string{
		"scsi0": fmt.Sprintf("%s:base-%d-disk-0,size=%dG", sharedStorage, templateVMID, templateDiskGiB),
		"ide2":  fmt.Sprintf("%s:vm-%d-cloudinit,media=cdrom", sharedStorage, templateVMID),
		"net0":  "virtio=BC:24:11:00:00:01,bridge=vmbr0", "cores": "1", "memory": "1024", "boot": "order=scsi0;ide2;net0",
	})
	l := &lab{b: b, ns: testenv.Namespace(b), sim: sim, lat: lat, c: testenv.Client()}

	tokenID, secret := sim.APIToken()
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret},
	})
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data:       map[string][]byte{"ca.crt": sim.CACertPEM()},
	})
	// Everything not set here (health-check interval, task timeout) keeps
	// its production default.
	l.create(&hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pve"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider:       hypervisorv1alpha1.ProviderProxmox,
			Endpoint:       sim.URL(),
			CredentialsRef: &meta.LocalObjectReference{Name: "pve-token"},
			TLS:            &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "pve-ca", Key: "ca.crt"}},
			Proxmox: &hypervisorv1alpha1.ProxmoxClusterSpec{
				DefaultBridge:                 "vmbr0",
				MaxConcurrentClonesPerNode:    clonesPerNode,
				MaxConcurrentClonesPerStorage: clonesPerStorage,
			},
		},
	})
	vmid := int32(templateVMID)
	disk := resource.MustParse(fmt.Sprintf("%dGi", claimDiskGiB))
	l.create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			Resources:  &hypervisorv1alpha1.MachineResources{CPUCores: 2, DiskSize: &disk},
			// A full clone onto shared storage may go to either node: placement
			// picks the node with a free clone slot and the most free memory.
			Placement: &hypervisorv1alpha1.Placement{Storage: sharedStorage},
			CloudInit: &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{
				"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPklYEYOAAQ5wdG7Ld42DyDAYdrfAmV+qaWeMTrHZYce ops@example.com"}},
			Proxmox: &hypervisorv1alpha1.ProxmoxTemplateSpec{
				Source:    hypervisorv1alpha1.ProxmoxSource{VMID: &vmid},
				CloneMode: hypervisorv1alpha1.CloneFull,
			},
		},
	})
	return l
}

func (l *lab) create(obj client.Object) {
	l.b.Helper()
	obj.SetNamespace(l.ns)
	if err := l.c.Create(context.Background(), obj); err != nil {
		l.b.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// waitReady waits for obj's Ready condition to be True.
func (l *lab) waitReady(obj interface {
	client.Object
	meta.ConditionsAccessor
}) {
	l.b.Helper()
	eventually.That(l.b, time.Minute, func() (bool, string) {
		if err := l.c.Get(context.Background(), client.ObjectKey{Namespace: l.ns, Name: obj.GetName()}, obj); err != nil {
			return false, err.Error()
		}
		return apimeta.IsStatusConditionTrue(obj.GetConditions(), meta.ReadyCondition),
			fmt.Sprintf("%T %s: %s", obj, obj.GetName(), hypervisorlab.Describe("", obj.GetConditions()))
	})
}

// createClaims creates n claims from a few goroutines, as fast as the API
// server takes them.
func (l *lab) createClaims(n int) {
	l.b.Helper()
	names := make(chan string, n)
	for i := range n {
		names <- fmt.Sprintf("claim-%04d", i)
	}
	close(names)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []string
	)
	for range creators {
		wg.Go(func() {
			for name := range names {
				mc := &hypervisorv1alpha1.MachineClaim{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.ns},
					Spec: hypervisorv1alpha1.MachineClaimSpec{
						TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"},
					},
				}
				if err := l.c.Create(context.Background(), mc); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("%s: %v", name, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		l.b.Fatalf("creating %d of %d claims failed: %s", len(errs), n, strings.Join(errs[:min(len(errs), 10)], "; "))
	}
}

// waitAllReady waits until the watch has seen all n claims Ready and
// returns them with when the last was seen Ready. It fails at once when
// one has failed for good (phase Failed or Stalled=True), naming it.
func (l *lab) waitAllReady(w *readyWatch, n int, timeout time.Duration, start time.Time) ([]hypervisorv1alpha1.MachineClaim, time.Time) {
	l.b.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if ready, failed, _ := w.counts(); failed > 0 || ready == n {
			break
		}
		select {
		case <-w.changed:
		case <-deadline.C:
			l.b.Fatalf("not all claims Ready within %s: %s%s", timeout, l.pending(n), l.costSoFar(n))
		}
	}
	_, failed, last := w.counts()
	var list hypervisorv1alpha1.MachineClaimList
	if err := l.c.List(context.Background(), &list, client.InNamespace(l.ns)); err != nil {
		l.b.Fatalf("listing the claims: %v", err)
	}
	if failed > 0 {
		var bad []*hypervisorv1alpha1.MachineClaim
		for i := range list.Items {
			mc := &list.Items[i]
			if failedForGood(mc) {
				bad = append(bad, mc)
			}
		}
		l.b.Fatalf("%d of %d claims failed after %s:\n%s%s", failed, n, time.Since(start).Round(time.Second), claimsReport(bad), l.costSoFar(n))
	}
	if len(list.Items) != n {
		l.b.Fatalf("%d claims Ready but %d listed, want %d", n, len(list.Items), n)
	}
	return list.Items, last
}

// pending says how many claims are Ready and details the others, for a
// run that ran out of time.
func (l *lab) pending(n int) string {
	var list hypervisorv1alpha1.MachineClaimList
	if err := l.c.List(context.Background(), &list, client.InNamespace(l.ns)); err != nil {
		return "listing the claims: " + err.Error()
	}
	var ready int
	var others []*hypervisorv1alpha1.MachineClaim
	for i := range list.Items {
		if mc := &list.Items[i]; mc.Status.Phase == hypervisorv1alpha1.MachineReady {
			ready++
		} else {
			others = append(others, mc)
		}
	}
	return fmt.Sprintf("%d of %d claims Ready (%d listed); the others:\n%s", ready, n, len(list.Items), claimsReport(others))
}

// costSoFar says what the claims have cost so far, for a run that fails.
func (l *lab) costSoFar(n int) string {
	api, pve := apiRequests.snapshot(), l.sim.Stats()
	return fmt.Sprintf("  so far: API-server requests %.1f/claim %s; Proxmox API requests %.1f/claim %s\n",
		float64(total(api))/float64(n), perClaim(byVerb(api), n, strings.Compare),
		float64(total(pve))/float64(n), perClaim(pve, n, func(a, b proxmoxsim.Operation) int { return strings.Compare(string(a), string(b)) }))
}

// claimsReport counts claims by phase and Ready reason, and details the first few.
func claimsReport(claims []*hypervisorv1alpha1.MachineClaim) string {
	groups := map[string]int{}
	for _, mc := range claims {
		reason := "-"
		if c := apimeta.FindStatusCondition(mc.Status.Conditions, meta.ReadyCondition); c != nil {
			reason = c.Reason
		}
		groups[fmt.Sprintf("phase %q reason %s", mc.Status.Phase, reason)]++
	}
	var out strings.Builder
	for _, g := range sortedKeys(groups, strings.Compare) {
		fmt.Fprintf(&out, "  %4d × %s\n", groups[g], g)
	}
	for _, mc := range claims[:min(len(claims), 10)] {
		fmt.Fprintf(&out, "  %s (VMID %v, node %q): %s\n", mc.Name, ptrValue(mc.Status.VMID), mc.Status.Node, hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions))
	}
	return out.String()
}

func ptrValue[T any](p *T) any {
	if p == nil {
		return "none"
	}
	return *p
}

// serialIdeal is the simulator's own time for one claim with nothing to wait
// for: the clone (from the call, which answers before the clone's
// temporary config appears, CloneConfigLag, to its task's end), the
// synchronous config updates, the disk resize (when the claim's disk is
// bigger than the template's), the start task and the boot until the guest
// agent reports an address:
//
//	CloneConfigLag + Clone + configSteps × Config + Resize + Start + Boot
//
// It leaves out the per-request API latency and every wait of the operator's
// own (polling a task, requeueing), which is what the measured time adds.
func serialIdeal(lat proxmoxsim.Latencies) time.Duration {
	d := cloneSlot(lat) + configSteps*lat.Config + lat.Start + lat.Boot
	if claimDiskGiB > templateDiskGiB {
		d += lat.Resize
	}
	return d
}

// cloneSlot is how long one clone holds its slot: from the clone call to its
// task's end. The clone's task runs CloneConfigLag before its Clone time
// starts (proxmoxsim.Latencies), and admission must count it from the call,
// or a burst would exceed the limits during the lag. The first estimate's "ideal
// 31.1 s" at 100 claims left the lag out; it is 35.0 s with it.
func cloneSlot(lat proxmoxsim.Latencies) time.Duration {
	return lat.CloneConfigLag + lat.Clone
}

// cloneConcurrency is how many clones may run at once: the per-node limit
// on every node, capped by the storage's (one pool for the whole cluster,
// shared storage being one lock) and by the simulator's storage lock.
func cloneConcurrency() int {
	return min(nodes*clonesPerNode, clonesPerStorage, storageLockLimit)
}

// throughputIdeal is the fastest n claims can all be Ready when clones are
// the bottleneck: ⌈n / cloneConcurrency⌉ back-to-back waves of clones, each
// slot taken again the instant a clone ends, then the rest of the last
// claim's serial work:
//
//	⌈n / cloneConcurrency⌉ × cloneSlot + (serialIdeal − cloneSlot)
func throughputIdeal(lat proxmoxsim.Latencies, n int) time.Duration {
	waves := (n + cloneConcurrency() - 1) / cloneConcurrency()
	return time.Duration(waves)*cloneSlot(lat) + serialIdeal(lat) - cloneSlot(lat)
}

// writes sums the requests that change something on the API server (every
// verb but get, list, watch and discovery), and those of them on the
// claims themselves (the claim and its status; the rest are events).
func writes(counts map[requestKind]int) (all, claims int) {
	for k, c := range counts {
		switch k.verb {
		case "get", "list", "watch", "discovery":
			continue
		}
		all += c
		if strings.HasPrefix(k.resource, "machineclaims") {
			claims += c
		}
	}
	return all, claims
}

// report computes, logs and reports the run's figures.
func (l *lab) report(n int, claims []hypervisorv1alpha1.MachineClaim, wall, created time.Duration,
	requests map[requestKind]int, pveRequests map[proxmoxsim.Operation]int, start time.Time) {
	b := l.b
	// Claim → Ready from the claim's own status. Both timestamps are
	// metav1.Time, which the API serializes with whole seconds (RFC 3339):
	// both are truncated, so each latency, and each percentile, may be off by
	// up to a second either way.
	latencies := make([]float64, 0, len(claims))
	perNode := map[string]int{}
	for i := range claims {
		mc := &claims[i]
		latencies = append(latencies, mc.Status.ReadyTime.Sub(mc.CreationTimestamp.Time).Seconds())
		perNode[mc.Status.Node]++
	}
	slices.Sort(latencies)
	p50, p95, p99 := percentile(latencies, 50), percentile(latencies, 95), percentile(latencies, 99)

	serial := serialIdeal(l.lat)
	throughput := throughputIdeal(l.lat, n)
	// p50/serial: how many times the simulator's own work for one claim the
	// median claim waited. 1 would be a claim served the instant it exists
	// and polled with no delay; under a burst of n ≫ cloneConcurrency claims
	// most of the excess is queueing for a clone slot, by design.
	p50Ratio := p50 / serial.Seconds()
	// wall/throughput: how close the operator comes to keeping every clone
	// slot busy back to back. 1 is the bound; the excess is slot time lost
	// between a clone's end and the operator noticing it (task polling,
	// requeue delays) and any API-server or CPU contention.
	wallRatio := wall.Seconds() / throughput.Seconds()

	apiTotal := total(requests)
	verbs := byVerb(requests)
	pveTotal := total(pveRequests)

	clones, maxClones, failedTasks, gap := l.taskFigures(start)

	// At most 9 lines: the testing package cuts a benchmark's log at 10.
	b.Logf("setup: %d nodes, full clones onto shared storage %q, clone limits %d/node %d/storage, simulator storage lock limit %d → %d clones at once; "+
		"simulator latencies: API %s, CloneConfigLag %s, Clone %s, Config %s ×%d, Resize %s, Start %s, Boot %s",
		nodes, sharedStorage, clonesPerNode, clonesPerStorage, storageLockLimit, cloneConcurrency(),
		l.lat.API, l.lat.CloneConfigLag, l.lat.Clone, l.lat.Config, configSteps, l.lat.Resize, l.lat.Start, l.lat.Boot)
	b.Logf("ideal: one claim %s (CloneConfigLag+Clone+%d×Config+Resize+Start+Boot); %d claims %s (⌈%d/%d⌉×(CloneConfigLag+Clone) + the rest of one claim); measured %s = %.2f× the ideal",
		serial, configSteps, n, throughput, n, cloneConcurrency(), wall.Round(time.Millisecond), wallRatio)
	b.Logf("claims=%d: created in %s; all Ready after %s (wall, to the watch event of the last); claim→Ready p50 %.1fs p95 %.1fs p99 %.1fs min %.0fs max %.0fs (readyTime−creationTimestamp, whole seconds)",
		n, created.Round(time.Millisecond), wall.Round(time.Millisecond), p50, p95, p99, latencies[0], latencies[len(latencies)-1])
	b.Logf("claims=%d: p50/serial-ideal %.2f; wall/throughput-ideal %.2f; machines per node %v; clone tasks %d, at most %d at once, a freed slot idle %s on average before the next clone; failed tasks %v",
		n, p50Ratio, wallRatio, perNode, clones, maxClones, gap.Round(time.Millisecond), failedTasks)
	allWrites, claimWrites := writes(requests)
	l.writesToReady = float64(allWrites) / float64(n)
	b.Logf("claims=%d: API-server requests %d = %.1f/claim; by verb %s; writes to Ready %.2f/claim (%.2f on the claim, %.2f events)",
		n, apiTotal, float64(apiTotal)/float64(n), perClaim(verbs, n, strings.Compare),
		float64(allWrites)/float64(n), float64(claimWrites)/float64(n), float64(allWrites-claimWrites)/float64(n))
	b.Logf("claims=%d: API-server requests by verb and resource %s", n, perClaim(requests, n, func(a, b requestKind) int {
		return cmp.Or(strings.Compare(a.verb, b.verb), strings.Compare(a.resource, b.resource))
	}))
	b.Logf("claims=%d: Proxmox API requests %d = %.1f/claim; by operation %s", n, pveTotal, float64(pveTotal)/float64(n),
		perClaim(pveRequests, n, func(a, b proxmoxsim.Operation) int { return strings.Compare(string(a), string(b)) }))

	b.ReportMetric(p50, "p50-s")
	b.ReportMetric(p95, "p95-s")
	b.ReportMetric(p99, "p99-s")
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(p50Ratio, "p50/serial-ideal")
	b.ReportMetric(wallRatio, "wall/throughput-ideal")
	b.ReportMetric(float64(apiTotal)/float64(n), "apiserver-req/claim")
	for verb, c := range verbs {
		if verb != "discovery" {
			b.ReportMetric(float64(c)/float64(n), "apiserver-"+verb+"/claim")
		}
	}
	b.ReportMetric(float64(pveTotal)/float64(n), "proxmox-req/claim")
	b.ReportMetric(float64(allWrites)/float64(n), "apiserver-writes-to-ready/claim")
}

// taskFigures reads the simulator's tasks since start: how many clones ran,
// the most that ran at once, and the failed tasks by type.
func (l *lab) taskFigures(start time.Time) (clones, maxConcurrent int, failed map[string]int, gap time.Duration) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	failed = map[string]int{}
	for _, t := range l.sim.Tasks() {
		if t.Start.Before(start) {
			continue
		}
		if !t.Running && t.ExitStatus != "OK" {
			failed[t.Type]++
		}
		if t.Type != "qmclone" {
			continue
		}
		clones++
		edges = append(edges, edge{t.Start, 1})
		if !t.Running {
			edges = append(edges, edge{t.End, -1})
		}
	}
	// Ends before starts at the same instant: a slot given back and taken
	// again is not two clones at once.
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	// gap: the slot-time no clone ran, from when every slot was first
	// taken to the last clone's start (not the ramp-up, not the tail when
	// nothing waits), shared out over the clones that started in between:
	// what the operator loses at each hand-over (noticing the end, waking
	// the next claim, its placement and VMID), the part of
	// wall/throughput-ideal that is not the simulator's own.
	cur, slots := 0, cloneConcurrency()
	var lastStart time.Time
	for _, e := range edges {
		if e.delta > 0 {
			lastStart = e.at
		}
	}
	var idle time.Duration
	full, handovers := false, 0
	for i, e := range edges {
		if full && cur < slots && !e.at.After(lastStart) {
			idle += time.Duration(slots-cur) * e.at.Sub(edges[i-1].at)
		}
		cur += e.delta
		maxConcurrent = max(maxConcurrent, cur)
		if full && e.delta > 0 {
			handovers++
		}
		full = full || cur >= slots
	}
	if handovers > 0 {
		gap = idle / time.Duration(handovers)
	}
	return clones, maxConcurrent, failed, gap
}

// perClaim renders counts divided by n, largest first.
func perClaim[K comparable](counts map[K]int, n int, less func(a, b K) int) string {
	var out []string
	for _, k := range sortedKeys(counts, less) {
		out = append(out, fmt.Sprintf("%v=%.2f", k, float64(counts[k])/float64(n)))
	}
	return "[" + strings.Join(out, " ") + "]"
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// teardown deletes the claims and waits until their machines are gone, so
// the next run does not inherit this one's load, then removes the cluster's
// objects and stops the simulator. It reports rather than stops on a
// timeout: it also runs after a failure.
func (l *lab) teardown(n int) {
	b := l.b
	ctx := context.Background()
	defer l.sim.Close()
	apiRequests.reset()
	if err := l.c.DeleteAllOf(ctx, &hypervisorv1alpha1.MachineClaim{}, client.InNamespace(l.ns)); err != nil {
		b.Errorf("deleting the claims: %v", err)
		return
	}
	timeout := 5*time.Minute + time.Duration(n)*600*time.Millisecond
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollEvery(n))
	defer tick.Stop()
	for {
		vms := 0
		for _, vm := range l.sim.VMs() {
			if !vm.Template {
				vms++
			}
		}
		var list hypervisorv1alpha1.MachineClaimList
		err := l.c.List(ctx, &list, client.InNamespace(l.ns))
		if vms == 0 && err == nil && len(list.Items) == 0 {
			all, claims := writes(apiRequests.snapshot())
			b.Logf("claims=%d: deletion writes %.2f/claim (%.2f on the claim, %.2f events); writes per claim lifecycle %.2f (to Ready plus these; aim ≤ 6)",
				n, float64(all)/float64(n), float64(claims)/float64(n), float64(all-claims)/float64(n),
				l.writesToReady+float64(all)/float64(n))
			break
		}
		if time.Now().After(deadline) {
			b.Errorf("teardown: within %s, %d VMs and %d claims (%v) are left", timeout, vms, len(list.Items), err)
			return
		}
		<-tick.C
	}
	for _, obj := range []client.Object{
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: l.ns}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve", Namespace: l.ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Namespace: l.ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Namespace: l.ns}},
	} {
		if err := l.c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			b.Errorf("teardown: deleting %T %s: %v", obj, obj.GetName(), err)
		}
	}
}
