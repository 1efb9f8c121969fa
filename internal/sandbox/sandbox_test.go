package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sandbox"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
)

// syncBuffer lets the test read what the sandbox prints while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// docs/sandbox.md's promise: `hyperfleet-dev` says what it runs, answers kubectl
// through the kubeconfig it prints, every sample (pointed at the simulators)
// and demo claim turns Ready, the nodes and the Performers' endpoints are
// there, queued GitHub jobs are run by runners that attested through a
// real spire-agent to the sandbox's SPIRE server before they had their JIT
// config, and Ctrl-C stops it all cleanly, SPIRE included.
func TestSandboxComesUpReadyAndStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	ready := make(chan string, 1)
	fast := proxmoxsim.DefaultLatencies()
	kvFast := kubevirtsim.DefaultLatencies()
	// Free ports, never the defaults the samples name, so the test also
	// shows the sandbox points the samples at wherever the simulators listen.
	pveAddr, ghAddr, hookAddr, spireAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	const ns = "samples"
	opts := sandbox.Options{
		StateDir:         t.TempDir(),
		SamplesNamespace: ns,
		Manager: manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", LeaderElect: true,
			LeaderElectionID: "hyperfleet-leader", OperatorNamespace: "hyperfleet-system",
			LeaderElectionNamespace: "hyperfleet-system", Identity: "sandbox-test",
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		},
		Out:               out,
		Ready:             func(kubeconfig string) { ready <- kubeconfig },
		ProxmoxAddr:       pveAddr,
		ProxmoxLatencies:  &fast,
		DemoClaims:        2,
		KubeVirt:          true,
		KubeVirtLatencies: &kvFast,
		GitHubAddr:        ghAddr,
		SPIREAddr:         spireAddr,
	}
	opts.Manager.Runners.WebhookAddr = hookAddr
	done := make(chan error, 1)
	go func() { done <- sandbox.Run(ctx, opts) }()

	var kubeconfig string
	select {
	case kubeconfig = <-ready:
	case err := <-done:
		t.Fatalf("sandbox stopped before it was ready: %v\n%s", err, out.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("sandbox not ready within 3 minutes:\n%s", out.String())
	}
	for _, want := range []string{
		"export KUBECONFIG=" + kubeconfig,
		fmt.Sprintf("KWOK runs %d nodes", len(testcluster.Nodes())),
		"Proxmox VE  simulator at https://" + pveAddr,
		"GitHub      simulator at http://" + ghAddr,
		"SPIRE       server at " + spireAddr + " (trust domain " + sandbox.SandboxTrustDomain + ")",
		"KubeVirt    simulator",
		"2 demo MachineClaims in namespace " + ns,
		"kubectl get hvc,hmt,mc,rp,cd,perf,hge -A",
		"kubectl get mc -l hyperfleet.io/standby=Cyberdesk -n " + ns,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the start message lacks %q:\n%s", want, out.String())
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("the printed kubeconfig does not load: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	lists := map[string]client.ObjectList{
		"hypervisorclusters":         &hypervisorv1alpha1.HypervisorClusterList{},
		"hypervisormachinetemplates": &hypervisorv1alpha1.HypervisorMachineTemplateList{},
		"machineclaims":              &hypervisorv1alpha1.MachineClaimList{},
		"runnerpools":                &hypervisorv1alpha1.RunnerPoolList{},
		"cyberdesks":                 &cyberdeskv1alpha1.CyberdeskList{},
		"performers":                 &hourglassv1alpha1.PerformerList{},
		"hourglassexecutors":         &hourglassv1alpha1.HourglassExecutorList{},
	}
	for name, list := range lists {
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			t.Errorf("listing %s: %v", name, err)
			continue
		}
		items, err := apimeta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) == 0 {
			t.Errorf("no %s from the samples", name)
		}
	}

	// The manager holds the leader Lease under its identity.
	eventually.That(t, 30*time.Second, func() (bool, string) {
		lease := &coordinationv1.Lease{}
		err := c.Get(ctx, types.NamespacedName{Namespace: "hyperfleet-system", Name: "hyperfleet-leader"}, lease)
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "sandbox-test" {
			return true, ""
		}
		return false, fmt.Sprintf("the manager does not hold the leader Lease (error %v, lease %+v)", err, lease.Spec)
	})

	// What `kubectl get hvc,hmt,mc,rp,cd,perf,hge -A` shows: every sample,
	// the demo claims and what the pool made, all Ready.
	want := append(sampleObjects(t, ns), "MachineClaim "+ns+"/demo-1", "MachineClaim "+ns+"/demo-2")
	checkEveryObjectReady(t, c, want)

	// kubectl get nodes, endpointslices.
	checkCluster(t, c, ns)

	// The sandbox keeps one hot desk machine in the samples' namespace: a
	// desk with no user data of its own takes it.
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"hyperfleet.io/standby": "Cyberdesk"})
		for _, sb := range list.Items {
			if sb.Status.Phase == hypervisorv1alpha1.MachineReady {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no hot desk machine Ready: %v, %d standby claims", err, len(list.Items))
	})
	quick := &cyberdeskv1alpha1.Cyberdesk{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quick-desk"}, Spec: cyberdeskv1alpha1.CyberdeskSpec{TimeoutMs: 600000}}
	if err := c.Create(ctx, quick); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(quick), quick)
		ref := quick.Status.VirtualMachineRef
		return err == nil && quick.Status.Phase == cyberdeskv1alpha1.CyberdeskRunning && ref != nil && strings.HasPrefix(ref.Name, "cyberdesk-standby-"),
			fmt.Sprintf("the desk without user data: %v, phase %q, VM %+v", err, quick.Status.Phase, ref)
	})

	// The Proxmox template keeps a warm machine: a claim with its own user
	// data and hostname takes it, configures it and boots it.
	var warm hypervisorv1alpha1.MachineClaim
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"hyperfleet.io/standby": "ubuntu-sim", "hyperfleet.io/standby-warm": "true"})
		for _, sb := range list.Items {
			if sb.Status.Phase == hypervisorv1alpha1.MachineWarm {
				warm = sb
				return true, ""
			}
		}
		return false, fmt.Sprintf("no warm machine: %v, %d warm claims", err, len(list.Items))
	})
	taker := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "warm-taker"}, Spec: hypervisorv1alpha1.MachineClaimSpec{
		TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu-sim"}, Hostname: "warm-taker", UserData: "#cloud-config\n"}}
	if err := c.Create(ctx, taker); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(taker), taker)
		return err == nil && taker.Status.Phase == hypervisorv1alpha1.MachineReady, fmt.Sprintf("claim warm-taker: %v, %+v", err, taker.Status)
	})
	if taker.Status.VMID == nil || *taker.Status.VMID != *warm.Status.VMID {
		t.Errorf("claim warm-taker runs VM %v; want the warm machine %d", taker.Status.VMID, *warm.Status.VMID)
	}

	// The TPM sample's machine proved its identity with its vTPM (swtpm,
	// provisioned with a DevID for the claim's UID) through a real
	// spire-agent's tpm_devid attestor, and checked in.
	eventually.That(t, 90*time.Second, func() (bool, string) {
		mc := &hypervisorv1alpha1.MachineClaim{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "attested-box"}, mc); err != nil {
			return false, err.Error()
		}
		st := mc.Status.Attestation
		return st != nil && st.Method == hypervisorv1alpha1.AttestationTPM && st.Phase == hypervisorv1alpha1.AttestationAttested,
			fmt.Sprintf("attested-box's attestation: %+v", st)
	})

	// The runner template keeps one hot machine: booted, attested, holding
	// no JIT config and registered nowhere; the pool keeps no idle runner.
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{}
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "runner-kubevirt"}, tmpl)
		return err == nil && tmpl.Status.Standby != nil && tmpl.Status.Standby.Hot == 1, fmt.Sprintf("the runner template's standby: %v %+v", err, tmpl.Status.Standby)
	})
	if runners := simRunners(t, ghAddr); len(runners) != 0 {
		t.Fatalf("GitHub lists runners while the pools idle on a hot machine: %v", runners)
	}
	// A job as `hyperfleet-dev enqueue-jobs --wait 2m` queues it: its runner
	// takes the hot machine and starts it at once.
	first := queueSimJob(t, ghAddr, `{"repo":"acme/widgets","labels":["self-hosted","sandbox"],"duration":"1s"}`)
	var started githubsim.Job
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		all, err := simJobs(ghAddr)
		if err != nil {
			return false, err.Error()
		}
		for _, j := range all {
			if j.ID == first.ID && !j.StartedAt.IsZero() {
				started = j
				return true, ""
			}
		}
		return false, fmt.Sprintf("job %d not started: %+v", first.ID, all)
	})
	runnerClaim := &hypervisorv1alpha1.MachineClaim{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: started.RunnerName}, runnerClaim); err != nil {
		t.Fatalf("the first job's runner %s: %v", started.RunnerName, err)
	}
	if !strings.Contains(runnerClaim.Status.MachineName, "runner-kubevirt-standby-") {
		t.Errorf("the first job's runner %s runs on %s, not the runner template's hot machine", started.RunnerName, runnerClaim.Status.MachineName)
	}
	t.Logf("the first job started %s after it was queued, on hot machine %s", started.StartedAt.Sub(started.CreatedAt).Round(100*time.Millisecond), runnerClaim.Status.MachineName)
	// It was the delivery that told the pool, not the poll a minute later.
	if codes := deliveryCodes(t, ghAddr, first.ID); !slices.Contains(codes, http.StatusAccepted) {
		t.Errorf("the first job's deliveries were answered %v, none accepted (202)", codes)
	}
	// Jobs as `hyperfleet-dev enqueue-jobs --count 3` queues them: more than
	// the hot machine, so the pool scales up and new machines attest too.
	const jobs = 3
	for range jobs {
		queueSimJob(t, ghAddr, `{"repo":"acme/widgets","labels":["self-hosted","sandbox"],"duration":"1s"}`)
	}
	var done3 []githubsim.Job
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		all, err := simJobs(ghAddr)
		if err != nil {
			return false, err.Error()
		}
		done3 = done3[:0]
		for _, j := range all {
			if j.Status == "completed" && j.Conclusion == "success" {
				done3 = append(done3, j)
			}
		}
		return len(done3) == jobs+1, fmt.Sprintf("the sample runners completed %d of %d jobs: %+v", len(done3), jobs+1, all)
	})
	// Every runner that ran one attested through its spire-agent before it
	// had its JIT config: the credential endpoint handed it out (the
	// samples' user data carries a join token, never a JIT config).
	for _, j := range done3 {
		credentialsReleased(t, ctx, c, ns, j)
	}
	// The scale-set sample serves jobs for its scale set (as
	// `hyperfleet-dev enqueue-jobs --mode scale-set` queues them), told of
	// them by the scale set's session, not by a delivery.
	eventually.That(t, 90*time.Second, func() (bool, string) {
		pool := &hypervisorv1alpha1.RunnerPool{}
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "scaleset-runners"}, pool)
		st := pool.Status.ScaleSet
		return err == nil && st != nil && st.Session == hypervisorv1alpha1.ScaleSetSessionOpen, fmt.Sprintf("the scale-set sample: %v %+v", err, st)
	})
	var ssJobs []int64
	var ssDone []githubsim.Job
	for range 2 {
		ssJobs = append(ssJobs, queueSimJob(t, ghAddr, `{"repo":"acme/widgets","labels":["sandbox-scaleset"],"duration":"1s"}`).ID)
	}
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		all, err := simJobs(ghAddr)
		if err != nil {
			return false, err.Error()
		}
		ssDone = ssDone[:0]
		for _, j := range all {
			if slices.Contains(ssJobs, j.ID) && j.Status == "completed" && j.Conclusion == "success" && strings.HasPrefix(j.RunnerName, "scaleset-runners-") {
				ssDone = append(ssDone, j)
			}
		}
		return len(ssDone) == len(ssJobs), fmt.Sprintf("the scale-set sample's runners completed %d of %d jobs: %+v", len(ssDone), len(ssJobs), all)
	})
	// The scale set's JIT configs take the same path: attested first,
	// handed out by the credential endpoint, never in user data.
	for _, j := range ssDone {
		credentialsReleased(t, ctx, c, ns, j)
	}
	// Where the sandbox keeps the SPIRE server's and the agents' files:
	// /tmp/hfdevNNN/spire/api.sock.
	m := regexp.MustCompile(`admin socket (\S+)\)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the start message names no SPIRE admin socket:\n%s", out.String())
	}
	spireBase := filepath.Dir(filepath.Dir(m[1]))
	if len(processesUnder(t, spireBase)) == 0 {
		t.Fatalf("no process runs from %s while the sandbox is up: the check after shutdown would prove nothing", spireBase)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sandbox stopped with %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("sandbox did not stop within a minute of Ctrl-C")
	}
	if !strings.Contains(out.String(), "Stopping kube-scheduler, kube-controller-manager and KWOK") {
		t.Errorf("no shutdown message for the cluster components:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "Stopping kube-apiserver and etcd") {
		t.Errorf("no shutdown message:\n%s", out.String())
	}
	// The SPIRE server and every runner's bootstrap agent and spire-agent
	// have exited, and their files are gone.
	if ps := processesUnder(t, spireBase); len(ps) > 0 {
		t.Errorf("processes of the sandbox's SPIRE outlived it: %v", ps)
	}
	if _, err := os.Stat(spireBase); !os.IsNotExist(err) {
		t.Errorf("the sandbox left %s behind (%v)", spireBase, err)
	}
	if conn, err := net.Dial("tcp", spireAddr); err == nil {
		_ = conn.Close()
		t.Errorf("something still listens on the SPIRE server's address %s", spireAddr)
	}
}

// processesUnder lists the processes whose command line names a path under
// dir (the SPIRE server's -config, a spire-agent's, a bootstrap agent's
// binary), as "pid: command line".
func processesUnder(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		args := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(args, dir+"/") {
			out = append(out, e.Name()+": "+args)
		}
	}
	return out
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

// queueSimJob queues a job on the sandbox's GitHub simulator, as
// `hyperfleet-dev enqueue-jobs` does.
func queueSimJob(t *testing.T, addr, body string) githubsim.Job {
	t.Helper()
	res, err := http.Post("http://"+addr+"/_sim/jobs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	var j githubsim.Job
	if err := json.NewDecoder(res.Body).Decode(&j); err != nil || res.StatusCode/100 != 2 {
		t.Fatalf("queueing a job %s: HTTP %d, %v", body, res.StatusCode, err)
	}
	return j
}

// simGet decodes what the simulated GitHub answers at path (/_sim/...).
func simGet(t *testing.T, addr, path string, out any) {
	t.Helper()
	res, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// simRunners are the runners the simulated GitHub lists, by name.
func simRunners(t *testing.T, addr string) []string {
	t.Helper()
	var all []githubsim.Runner
	simGet(t, addr, "/_sim/runners", &all)
	names := make([]string, 0, len(all))
	for _, r := range all {
		names = append(names, r.Name)
	}
	return names
}

// simJobs lists the sandbox's GitHub simulator's jobs; an error rather than a
// failure, for use inside eventually.That.
func simJobs(addr string) ([]githubsim.Job, error) {
	res, err := http.Get("http://" + addr + "/_sim/jobs")
	if err != nil {
		return nil, err
	}
	defer func() { _ = res.Body.Close() }()
	var all []githubsim.Job
	return all, json.NewDecoder(res.Body).Decode(&all)
}

// credentialsReleased waits for the event saying the credential endpoint
// handed the runner that ran job j its JIT config, to its attested SVID.
func credentialsReleased(t *testing.T, ctx context.Context, c client.Client, ns string, j githubsim.Job) {
	t.Helper()
	eventually.That(t, 30*time.Second, func() (bool, string) {
		var events corev1.EventList
		if err := c.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Reason == "CredentialsReleased" && e.InvolvedObject.Kind == "MachineClaim" && e.InvolvedObject.Name == j.RunnerName {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no CredentialsReleased event for the runner claim %s, which ran job %d", j.RunnerName, j.ID)
	})
}

// deliveryCodes are the receiver's answers to githubsim's deliveries of a
// job.
func deliveryCodes(t *testing.T, addr string, job int64) []int {
	t.Helper()
	var all []githubsim.Delivery
	simGet(t, addr, "/_sim/deliveries", &all)
	var codes []int
	for _, d := range all {
		if d.JobID == job {
			codes = append(codes, d.StatusCode)
		}
	}
	return codes
}
