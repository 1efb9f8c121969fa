package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
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
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/providers/proxmox/proxmoxsim"
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

// The README's promise: `hyperfleet dev` says what it runs, answers kubectl
// through the kubeconfig it prints, every sample (pointed at the simulators)
// and demo claim turns Ready, the nodes and the Performers' endpoints are
// there, a queued GitHub job is run, and Ctrl-C stops it all cleanly.
func TestSandboxComesUpReadyAndStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	ready := make(chan string, 1)
	fast := proxmoxsim.DefaultLatencies()
	kvFast := kubevirtsim.DefaultLatencies()
	// Free ports, never the defaults the samples name, so the test also
	// shows the sandbox points the samples at wherever the simulators listen.
	pveAddr, ghAddr, hookAddr := freeAddr(t), freeAddr(t), freeAddr(t)
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
		"KubeVirt    simulator",
		"2 demo MachineClaims in namespace " + ns,
		"kubectl get hvc,hmt,mc,rp,cd,perf,hge -A",
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

	// The sample RunnerPool keeps one idle runner; a queued job is taken by
	// a runner (a webhook delivery to the manager scales the pool).
	eventually.That(t, 90*time.Second, func() (bool, string) {
		pool := &hypervisorv1alpha1.RunnerPool{}
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "demo-runners"}, pool)
		return err == nil && pool.Status.IdleReplicas >= 1, fmt.Sprintf("the sample RunnerPool has no idle runner: %v %+v", err, pool.Status)
	})
	var enqueueOut bytes.Buffer
	res, err := http.Post("http://"+ghAddr+"/_sim/jobs", "application/json",
		strings.NewReader(`{"repo":"acme/widgets","labels":["self-hosted","sandbox"],"duration":"1s"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = enqueueOut.ReadFrom(res.Body)
	_ = res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("queueing a job: %d %s", res.StatusCode, enqueueOut.String())
	}
	eventually.True(t, 90*time.Second, "the queued job was not completed by a sample runner", func() bool {
		res, err := http.Get("http://" + ghAddr + "/_sim/jobs")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		return strings.Contains(string(body), `"status":"completed"`)
	})

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
