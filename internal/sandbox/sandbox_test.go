package sandbox_test

import (
	"bytes"
	"context"
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
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sandbox"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
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

// The README's promise: `hyperfleet dev` answers kubectl get for every kind
// through the kubeconfig it prints, and stops cleanly on Ctrl-C.
func TestSandboxServesEveryKindAndStopsCleanly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	ready := make(chan string, 1)
	fast := proxmoxsim.DefaultLatencies()
	kvFast := kubevirtsim.DefaultLatencies()
	ghAddr, hookAddr := freeAddr(t), freeAddr(t)
	opts := sandbox.Options{
		StateDir:         t.TempDir(),
		SamplesNamespace: "samples",
		Manager: manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", LeaderElect: true,
			LeaderElectionID: "hyperfleet-leader", OperatorNamespace: "hyperfleet-system",
			LeaderElectionNamespace: "hyperfleet-system", Identity: "sandbox-test",
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		},
		Out:               out,
		Ready:             func(kubeconfig string) { ready <- kubeconfig },
		ProxmoxAddr:       "127.0.0.1:0",
		ProxmoxLatencies:  &fast,
		SandboxNamespace:  "sandbox",
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
	if !strings.Contains(out.String(), "export KUBECONFIG="+kubeconfig) {
		t.Errorf("the sandbox does not print how to use its kubeconfig:\n%s", out.String())
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
		if err := c.List(ctx, list, client.InNamespace("samples")); err != nil {
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
	lease := &coordinationv1.Lease{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Get(ctx, types.NamespacedName{Namespace: "hyperfleet-system", Name: "hyperfleet-leader"}, lease)
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "sandbox-test" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manager did not take the leader Lease within 30s (last error %v, lease %+v)", err, lease.Spec)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The demo claims on the simulated Proxmox reach Ready.
	for _, name := range []string{"demo-1", "demo-2"} {
		mc := &hypervisorv1alpha1.MachineClaim{}
		deadline := time.Now().Add(90 * time.Second)
		for {
			err := c.Get(ctx, types.NamespacedName{Namespace: "sandbox", Name: name}, mc)
			if err == nil && mc.Status.Phase == hypervisorv1alpha1.MachineReady {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("demo claim %s not Ready within 90s: %v %+v", name, err, mc.Status)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The sample Cyberdesk boots on the KubeVirt simulator from the template
	// ConfigMap the sandbox installed.
	desk := &cyberdeskv1alpha1.Cyberdesk{}
	deadline = time.Now().Add(90 * time.Second)
	for {
		err := c.Get(ctx, types.NamespacedName{Namespace: "samples", Name: "alice-desktop"}, desk)
		if err == nil && desk.Status.Phase == cyberdeskv1alpha1.CyberdeskRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sample Cyberdesk is not Running within 90s: %v %+v", err, desk.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The whole cluster runs: KWOK's nodes are Ready, every sample Performer
	// and executor is Ready (their Pods placed by the real scheduler and
	// run by KWOK), and each Performer's Service has a ready endpoint.
	checkCluster(t, c)

	// The demo RunnerPool keeps one idle runner; a queued job is taken by a
	// runner (a webhook delivery to the manager scales the pool).
	pool := &hypervisorv1alpha1.RunnerPool{}
	deadline = time.Now().Add(90 * time.Second)
	for {
		err := c.Get(ctx, types.NamespacedName{Namespace: "sandbox", Name: "demo-runners"}, pool)
		if err == nil && pool.Status.IdleReplicas >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo RunnerPool has no idle runner within 90s: %v %+v", err, pool.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
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
	deadline = time.Now().Add(90 * time.Second)
	for {
		res, err := http.Get("http://" + ghAddr + "/_sim/jobs")
		if err == nil {
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if strings.Contains(string(body), `"status":"completed"`) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queued job was not completed by a demo runner within 90s")
		}
		time.Sleep(200 * time.Millisecond)
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
