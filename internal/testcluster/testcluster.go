// Package testcluster turns a running kube-apiserver (internal/controlplane)
// into a small whole cluster: the real kube-scheduler, the
// kube-controller-manager's workload controllers, and KWOK playing the
// kubelet on simulated nodes (general, GPU, SGX, Bottlerocket). Pods are
// scheduled by the real scheduler, run and turn Ready with an IP, and
// Services get EndpointSlices, Deployments ReplicaSets, owners' dependents
// are garbage-collected and namespaces really go away.
//
// A suite opts in by wrapping its testenv.MainWith setup in Around; the
// plain API server stays the default for suites that need no more.
package testcluster

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
)

// Controllers are the kube-controller-manager controllers a test cluster
// runs: what Deployments, Services, owner references and namespaces need,
// and node lifecycle, which lifts the node.kubernetes.io/not-ready taint the
// API server puts on every new node once kwok reports it Ready (without it
// nothing schedules). The service-account token controller is left out: the
// API server admits Pods without tokens, as envtest sets it up.
var Controllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"endpointslice-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"node-lifecycle-controller",
}

// PodCIDR is where kwok hands out Pod IPs: apart from envtest's Service
// range (controlplane.ServiceCIDR, 10.0.0.0/16), so a Pod IP is never mistaken for a ClusterIP, and
// from kubevirtsim's VM addresses (10.244.0.0/16), which the sandbox runs too.
const PodCIDR = "10.42.0.0/16"

//go:embed stages/pods.yaml
var podStages []byte

// Options configure a cluster.
type Options struct {
	// Config reaches the running API server as a cluster admin.
	Config *rest.Config
	// Binaries hold kube-scheduler, kube-controller-manager and kwok
	// (controlplane.FindClusterBinaries).
	Binaries controlplane.ClusterBinaries
	// Nodes to create; Nodes() when nil.
	Nodes []*corev1.Node
	// StartTimeout bounds the wait for the nodes and the first Pod; on a
	// loaded 2-core machine the components take seconds each to start.
	StartTimeout time.Duration
}

// Cluster is the scheduler, the controller-manager and kwok, running
// against one API server.
type Cluster struct {
	dir       string
	processes []*process
	// NodeNames are the simulated nodes, all Ready when Start returns.
	NodeNames []string
}

// Start runs the components against opts.Config's API server, creates the
// nodes and returns once every node is Ready and a probe Pod has been
// scheduled, run and collected, so the first test finds a working cluster.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Nodes == nil {
		opts.Nodes = Nodes()
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	dir, err := os.MkdirTemp("", "testcluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(opts.Config, kubeconfig); err != nil {
		return nil, err
	}
	stages := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, podStages, 0o600); err != nil {
		return nil, err
	}
	if err := c.startComponents(opts.Binaries, kubeconfig, stages); err != nil {
		return nil, err
	}

	cs, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, err
	}
	for _, n := range opts.Nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating node %s: %w", n.Name, err)
		}
		c.NodeNames = append(c.NodeNames, n.Name)
	}
	waitCtx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if err := c.waitNodesReady(waitCtx, cs); err != nil {
		return nil, err
	}
	if err := c.probe(waitCtx, cs); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startComponents(bins controlplane.ClusterBinaries, kubeconfig, stages string) error {
	// No component serves HTTPS (--secure-port=0): parallel suites would
	// fight over fixed ports, and nothing here scrapes them.
	specs := []struct {
		name, binary string
		args         []string
	}{
		{"kube-scheduler", filepath.Join(bins.Dir, "kube-scheduler"), []string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
		}},
		{"kube-controller-manager", filepath.Join(bins.Dir, "kube-controller-manager"), []string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			"--use-service-account-credentials=false",
			"--controllers=" + strings.Join(Controllers, ","),
			// Collect a terminating namespace's objects promptly between tests.
			"--concurrent-namespace-syncs=4",
		}},
		{"kwok", filepath.Join(bins.KwokDir, "kwok"), []string{
			"--kubeconfig=" + kubeconfig,
			"--config=" + stages,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + kwokAnnotation + "=fake",
			"--cidr=" + PodCIDR,
			"--node-ip=127.0.0.1",
			// Renew each node's Lease as a kubelet does. Without it kwok
			// neither holds Leases nor posts status often enough, and
			// the node-lifecycle controller, past its grace period, marks
			// every Pod on the node not Ready (about 50 s after start).
			"--node-lease-duration-seconds=40",
		}},
	}
	for _, s := range specs {
		p, err := startProcess(s.name, s.binary, c.dir, s.args...)
		if err != nil {
			return err
		}
		c.processes = append(c.processes, p)
	}
	return nil
}

// waitNodesReady waits for kwok to report every node Ready and to hold its Lease.
func (c *Cluster) waitNodesReady(ctx context.Context, cs kubernetes.Interface) error {
	var notReady []string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.anyExited(); err != nil {
			return false, err
		}
		notReady = notReady[:0]
		for _, name := range c.NodeNames {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !nodeReady(n) {
				notReady = append(notReady, name)
				continue
			}
			// A node is healthy for the node-lifecycle controller once
			// its Lease is held, as a kubelet's is.
			if _, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{}); err != nil {
				notReady = append(notReady, name+" (no Lease)")
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for nodes %v to turn Ready: %w\n%s", notReady, err, c.logs())
	}
	return nil
}

// probe runs one Pod through the scheduler and kwok, and waits for the
// controller-manager's service-account controller, so a failure to start
// shows here with the components' logs rather than as a puzzling test.
func (c *Cluster) probe(ctx context.Context, cs kubernetes.Interface) error {
	const ns = "default"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "testcluster-probe", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the probe Pod: %w", err)
	}
	var state string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.anyExited(); err != nil {
			return false, err
		}
		got, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		state = fmt.Sprintf("node %q, phase %s, IP %q", got.Spec.NodeName, got.Status.Phase, got.Status.PodIP)
		if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
			return false, nil
		}
		_, err = cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			state += "; no default ServiceAccount yet (the controller-manager is not up)"
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the probe Pod did not run (%s): %w\n%s", state, err, c.logs())
	}
	return cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})
}

func (c *Cluster) anyExited() error {
	for _, p := range c.processes {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// logs are the components' last lines, for a start that failed.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, p := range c.processes {
		fmt.Fprintf(&b, "--- %s (%s):\n%s\n", p.name, p.log, p.tail(15))
	}
	return b.String()
}

// Logs writes every component's last lines to w (for a failed test run).
func (c *Cluster) Logs(w io.Writer) { _, _ = io.WriteString(w, c.logs()) }

// Stop stops the components (the API server is the caller's) and removes
// their files.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.processes) - 1; i >= 0; i-- {
		errs = append(errs, c.processes[i].stop(context.Background()))
	}
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// writeKubeconfig renders cfg (client-certificate admin) as a kubeconfig
// file the components read.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

// Test controls over kwok's kubelet, read by the Stages in stages/pods.yaml.
const (
	// HoldReadyEnv, set on a container (any value), keeps its Pod bound but
	// not running until the test annotates the Pod with ReleaseAnnotation:
	// the window a real Pod spends pulling and starting, as long as a test needs.
	HoldReadyEnv      = "TESTCLUSTER_HOLD_READY"
	ReleaseAnnotation = "testcluster.hyperfleet.io/ready"
	// EvictAnnotation on a Pod makes kwok fail it as a kubelet evicting
	// under node pressure does (phase Failed, reason Evicted).
	EvictAnnotation = "testcluster.hyperfleet.io/evict"
)
