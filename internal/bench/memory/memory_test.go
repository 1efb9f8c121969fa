package memory

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

const (
	// defaultClaims and defaultNoise are the sizes: 10,000
	// MachineClaims, half on each simulator, beside 10,000 unrelated Pods
	// and 10,000 unrelated ConfigMaps. MEMORY_CLAIMS and MEMORY_NOISE
	// override them (a quick look: MEMORY_CLAIMS=200 MEMORY_NOISE=200);
	// MEMORY_GOMEMLIMIT gives the operator a GOMEMLIMIT, as the Deployment
	// does from its container's memory limit.
	defaultClaims = 10000
	defaultNoise  = 10000
	// writers is how many goroutines create objects.
	writers = 16
	// settle is how long the operator is left alone before a steady reading:
	// long enough for the garbage collector to run a few times.
	settle = 30 * time.Second
	// budget is the aim for the whole run's peak.
	budget = 200 << 20
)

// BenchmarkManagerMemory runs the operator's binary against a cluster that
// holds many objects it must not cache (Pods, ConfigMaps of other
// workloads) and then many MachineClaims it must, and prints its resident
// set at each stage:
//
//	make bench-memory   # or:
//	go test -run '^$' -bench ManagerMemory -benchtime 1x -timeout 60m ./internal/bench/memory/
func BenchmarkManagerMemory(b *testing.B) {
	claims, noise := envInt(b, "MEMORY_CLAIMS", defaultClaims), envInt(b, "MEMORY_NOISE", defaultNoise)
	for range b.N {
		managerMemory(b, claims, noise)
	}
}

func managerMemory(b *testing.B, claims, noise int) {
	b.StopTimer()
	ctx := context.Background()
	if err := hypervisorlab.InstallKubeVirt(ctx); err != nil {
		b.Fatal(err)
	}
	c := testenv.Client()
	ensureNamespace(b, "hyperfleet-system")

	start := time.Now()
	noiseNS := testenv.Namespace(b)
	createAll(b, noise, func(i int) client.Object { return unrelatedPod(noiseNS, i) })
	createAll(b, noise, func(i int) client.Object { return unrelatedConfigMap(noiseNS, i) })
	b.Logf("created %d unrelated Pods and %d ConfigMaps in %s", noise, noise, time.Since(start).Round(time.Second))

	cfg := testenv.Config()
	cfg.QPS = -1 // the simulator keeps pace with the operator, not a client-side limiter
	kv, err := kubevirtsim.Start(ctx, cfg, kubevirtsim.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kv.Stop)
	pve := startProxmox(b)

	bin, err := testenv.BuildOperator(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	op := startOperator(b, bin)
	ns := testenv.Namespace(b)
	createClusters(b, c, ns, pve)
	waitReady(b, op, ns, 2*time.Minute, &hypervisorv1alpha1.HypervisorMachineTemplateList{}, 2)
	time.Sleep(settle) // let the caches fill and the collector run: this is a reading, not an assertion
	idle := mustRSS(b, op)

	op.ResetPeak()
	cpuBefore := mustCPU(b, op)
	b.StartTimer()
	start = time.Now()
	createAll(b, claims, func(i int) client.Object { return claim(ns, i) })
	waitReady(b, op, ns, time.Duration(claims)*300*time.Millisecond+10*time.Minute, &hypervisorv1alpha1.MachineClaimList{}, claims)
	ready := time.Since(start)
	b.StopTimer()
	time.Sleep(settle)
	steady := mustRSS(b, op)
	cpuUsed := mustCPU(b, op) - cpuBefore
	anon, _ := op.Status("RssAnon")
	file, _ := op.Status("RssFile")
	peak := op.PeakRSS()
	profile := filepath.Join(os.TempDir(), "hyperfleet-memory-heap.pprof")
	heap, err := op.heapProfile(profile)
	if err != nil {
		b.Fatal(err)
	}
	op.alive(b)

	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(mib(idle), "idle-MiB")
	b.ReportMetric(mib(peak), "peak-MiB")
	b.ReportMetric(mib(steady), "steady-MiB")
	b.ReportMetric(cpuUsed.Seconds(), "cpu-s")
	fmt.Printf("\nManager memory (the hyperfleet binary as its own process; RSS from /proc, sampled every 250 ms)\n")
	limit := os.Getenv("MEMORY_GOMEMLIMIT")
	if limit == "" {
		limit = "unset (no soft memory limit)"
	}
	fmt.Printf("  GOMEMLIMIT of the operator              %s\n", limit)
	gc := os.Getenv("MEMORY_GOGC")
	if gc == "" {
		gc = "unset (the operator's --gc-percent default)"
	}
	fmt.Printf("  GOGC of the operator                    %s\n", gc)
	fmt.Printf("  unrelated objects in the cluster        %d Pods, %d ConfigMaps\n", noise, noise)
	fmt.Printf("  RSS idle among them (no claims)         %.1f MiB\n", mib(idle))
	fmt.Printf("  MachineClaims                           %d (%d on proxmoxsim, %d on kubevirtsim), all Ready in %s\n",
		claims, claims-claims/2, claims/2, ready.Round(time.Second))
	fmt.Printf("  RSS peak while they were made           %.1f MiB (aim: at most %d MiB)\n", mib(peak), budget>>20)
	fmt.Printf("  RSS steady, %s after the last Ready    %.1f MiB\n", settle, mib(steady))
	fmt.Printf("    of which anonymous / the binary's pages %.1f / %.1f MiB\n", mib(anon), mib(file))
	fmt.Printf("  operator CPU from first claim to steady %.1f s\n", cpuUsed.Seconds())
	fmt.Printf("  RSS per claim, steady minus idle        %.1f KiB\n", float64(steady-idle)/1024/float64(max(claims, 1)))
	fmt.Printf("  Go heap live after a collection         %.1f MiB (runtime holds %.1f MiB); profile: go tool pprof %s\n\n",
		mib(heap.Alloc), mib(heap.Sys), profile)
}

// startProxmox starts a simulator roomy enough for 5,000 running 1-GiB VMs
// and their disks, so placement never finds it full.
func startProxmox(b *testing.B) *proxmoxsim.Server {
	b.Helper()
	sim := proxmoxsim.New(proxmoxsim.Options{
		Nodes: []proxmoxsim.Node{
			{Name: "pve1", CPUs: 4096, Memory: 64 << 40},
			{Name: "pve2", CPUs: 4096, Memory: 64 << 40},
		},
		Storages: []proxmoxsim.Storage{
			{Name: "local", Type: "dir", Content: []string{"iso", "vztmpl", "snippets", "backup"}},
			{Name: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}, Shared: true, Capacity: 1 << 50},
		},
		// The benchmark measures memory, not the hypervisor's pace: no storage
		// lock failures, and the cluster below allows many clones at once.
		StorageLockLimit: -1,
		ErrorLog:         log.New(io.Discard, "", 0),
	})
	if err := sim.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sim.Close)
	sim.AddTemplate("pve1", 9000, "ubuntu-24.04", map[string]string{
		"scsi0": "ceph:base-9000-disk-0,size=10G", "ide2": "ceph:vm-9000-cloudinit,media=cdrom",
		"net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0", "cores": "1", "memory": "1024", "boot": "order=scsi0;ide2;net0",
	})
	return sim
}

// createClusters makes a Proxmox and a KubeVirt cluster, each with a
// template named after it.
func createClusters(b *testing.B, c client.Client, ns string, sim *proxmoxsim.Server) {
	b.Helper()
	tokenID, secret := sim.APIToken()
	vmid := int32(9000)
	cloudInit := &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{hypervisorlab.SSHKey}}
	objs := []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Labels: map[string]string{meta.CredentialsLabel: "true"}},
			Data:       map[string][]byte{"ca.crt": sim.CACertPEM()},
		},
		&hypervisorv1alpha1.HypervisorCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "pve"},
			Spec: hypervisorv1alpha1.HypervisorClusterSpec{
				Provider: hypervisorv1alpha1.ProviderProxmox, Endpoint: sim.URL(),
				CredentialsRef: &meta.LocalObjectReference{Name: "pve-token"},
				TLS:            &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "pve-ca", Key: "ca.crt"}},
				Proxmox: &hypervisorv1alpha1.ProxmoxClusterSpec{DefaultBridge: "vmbr0",
					MaxConcurrentClonesPerNode: 32, MaxConcurrentClonesPerStorage: 64},
			},
		},
		&hypervisorv1alpha1.HypervisorMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "pve"},
			Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
				ClusterRef: meta.LocalObjectReference{Name: "pve"}, CloudInit: cloudInit,
				Placement: &hypervisorv1alpha1.Placement{Storage: "ceph"},
				Proxmox:   &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
			},
		},
		&hypervisorv1alpha1.HypervisorCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "kv"},
			Spec:       hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt},
		},
		&hypervisorv1alpha1.HypervisorMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "kv"},
			Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
				ClusterRef: meta.LocalObjectReference{Name: "kv"}, CloudInit: cloudInit,
				KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(hypervisorlab.KubeVirtVM)}},
			},
		},
	}
	for _, obj := range objs {
		obj.SetNamespace(ns)
		if err := c.Create(context.Background(), obj); err != nil {
			b.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// claim i alternates between the two templates.
func claim(ns string, i int) client.Object {
	template := "pve"
	if i%2 == 1 {
		template = "kv"
	}
	return &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%05d", i), Namespace: ns},
		Spec: hypervisorv1alpha1.MachineClaimSpec{
			TemplateRef:         hypervisorv1alpha1.TemplateReference{Name: template},
			ProvisioningTimeout: &metav1.Duration{Duration: time.Hour},
		},
	}
}

// unrelatedPod is another workload's Pod, of a typical size: nothing
// HyperFleet made, so nothing its cache should hold.
func unrelatedPod(ns string, i int) client.Object {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%05d", i), Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/name": "web", "app.kubernetes.io/managed-by": "helm"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: "nginx:1.27",
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "REPLICA", Value: strconv.Itoa(i)}},
			Ports: []corev1.ContainerPort{{ContainerPort: 8080, Name: "http"}},
		}}},
	}
}

// unrelatedConfigMap holds 2 KiB of another workload's configuration.
func unrelatedConfigMap(ns string, i int) client.Object {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-config-%05d", i), Namespace: ns},
		Data:       map[string]string{"app.conf": strings.Repeat("key = value\n", 170)},
	}
}

// createAll creates n objects from a few goroutines.
func createAll(b *testing.B, n int, obj func(int) client.Object) {
	b.Helper()
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range writers {
		wg.Go(func() {
			for i := range next {
				if err := testenv.Client().Create(context.Background(), obj(i)); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// waitReady pages through ns's objects of list's kind until want of them
// are Ready, failing on one that failed for good or at timeout. It prints
// its progress every 30 s: a 10,000-claim run takes many minutes.
func waitReady(b *testing.B, op *operator, ns string, timeout time.Duration, list client.ObjectList, want int) {
	b.Helper()
	start := time.Now()
	deadline, lastReport := start.Add(timeout), start
	for {
		op.alive(b)
		ready, failed, err := countReady(ns, list)
		switch {
		case err != nil:
			b.Logf("listing: %v", err)
		case failed != "":
			b.Fatalf("failed for good: %s", failed)
		case ready >= want:
			return
		case time.Now().After(deadline):
			b.Fatalf("%d of %d Ready after %s", ready, want, timeout)
		}
		if time.Since(lastReport) >= 30*time.Second {
			rss, _ := op.RSS()
			fmt.Fprintf(os.Stderr, "memory: %d/%d Ready after %s; operator RSS %.0f MiB\n",
				ready, want, time.Since(start).Round(time.Second), float64(rss)/(1<<20))
			lastReport = time.Now()
		}
		time.Sleep(2 * time.Second)
	}
}

func countReady(ns string, list client.ObjectList) (ready int, failed string, err error) {
	opts := []client.ListOption{client.InNamespace(ns), client.Limit(500)}
	for {
		if err := testenv.Client().List(context.Background(), list, opts...); err != nil {
			return 0, "", err
		}
		items, err := apimeta.ExtractList(list)
		if err != nil {
			return 0, "", err
		}
		for _, item := range items {
			obj := item.(meta.ConditionsAccessor)
			switch {
			case apimeta.IsStatusConditionTrue(obj.GetConditions(), meta.ReadyCondition):
				ready++
			case apimeta.IsStatusConditionTrue(obj.GetConditions(), meta.StalledCondition):
				failed = fmt.Sprintf("%s: %s", item.(client.Object).GetName(), hypervisorlab.Describe("", obj.GetConditions()))
			}
		}
		cont := list.GetContinue()
		if cont == "" {
			return ready, failed, nil
		}
		opts = []client.ListOption{client.InNamespace(ns), client.Limit(500), client.Continue(cont)}
	}
}

func mustRSS(b *testing.B, op *operator) int64 {
	b.Helper()
	op.alive(b)
	rss, err := op.RSS()
	if err != nil {
		b.Fatal(err)
	}
	return rss
}

func mustCPU(b *testing.B, op *operator) time.Duration {
	b.Helper()
	op.alive(b)
	d, err := op.CPU()
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func ensureNamespace(b *testing.B, name string) {
	b.Helper()
	err := testenv.Client().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		b.Fatal(err)
	}
}

func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}
