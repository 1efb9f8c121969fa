package performers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/kustomize/crd"
)

// operatorUser is the user the operator's kubeconfig authenticates as
// (controlplane.WriteKubeconfig's): the audit log is filtered by it, so the
// benchmark's own client, the scheduler, the controller-manager and kwok
// are not counted.
const operatorUser = "hyperfleet-dev-admin"

// auditPolicy logs the operator's requests at Metadata level (verb,
// resource, name, time; no bodies), one event per request once it
// completes; status writes with their bodies, so an idle write shows what
// it changed; and everyone else's writes at Metadata level, so the table
// shows what else the API server stored meanwhile (the scheduler's
// bindings, kwok's Pod statuses, the EndpointSlices): on 2 cores that
// traffic, not the operator, bounds the time to served.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Request
  users: ["` + operatorUser + `"]
  verbs: ["patch", "update"]
  resources: [{group: hourglass.eigenlayer.io, resources: ["performers/status"]}]
- level: Metadata
  users: ["` + operatorUser + `"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// The package's cluster: its own control plane (not internal/testenv's,
// which takes no kube-apiserver flags) with the audit log on, and the test
// cluster's components around it.
var (
	plane      *controlplane.ControlPlane
	auditLog   string
	kubeconfig string
	planeCfg   *rest.Config
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "bench-performers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	policy := filepath.Join(dir, "audit-policy.yaml")
	auditLog = filepath.Join(dir, "audit.log")
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bins, err := controlplane.BinaryDir(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	crds, err := crd.CRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	plane, err = controlplane.Start(controlplane.Options{BinaryDir: bins, CRDs: crds, APIServerFlags: map[string]string{
		"audit-policy-file": policy,
		"audit-log-path":    auditLog,
		"audit-log-format":  "json",
		// One file for the whole run: rotation would hide events.
		"audit-log-maxsize": "0",
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := plane.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
		}
	}()
	planeCfg = plane.Config
	if err := plane.WriteKubeconfig(kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	clusterBins, err := controlplane.FindClusterBinaries(ctx, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster, err := testcluster.Start(ctx, testcluster.Options{Config: plane.Config, Binaries: clusterBins, Nodes: nodes(envInt("PERF_N", defaultN))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testcluster: %v\n", err)
		}
	}()
	return m.Run()
}

// nodes are the test cluster's, the general ones with room for n Pods
// between them (a kubelet's default is 110 each).
func nodes(n int) []*corev1.Node {
	out := testcluster.Nodes()
	room := resource.MustParse(strconv.Itoa(max(110, n/2+50)))
	for _, node := range out {
		if node.Name == testcluster.NodeGeneral1 || node.Name == testcluster.NodeGeneral2 {
			node.Status.Capacity[corev1.ResourcePods] = room
			node.Status.Allocatable[corev1.ResourcePods] = room
		}
	}
	return out
}

// envInt reads a size from the environment, def when unset or bad.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// envDuration reads a duration from the environment, def when unset or bad.
func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
