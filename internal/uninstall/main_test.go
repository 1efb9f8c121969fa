package uninstall_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/logging"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// root is the repository, seen from this package's folder.
const root = "../.."

// The suite runs on a whole cluster: its kube-controller-manager runs the
// namespace controller and the garbage collector, so a deleted namespace
// really finishes terminating — or really stays Terminating.
func TestMain(m *testing.M) {
	testenv.MainWith(m, testcluster.Around(testenv.Config, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		return func() {}, nil
	}))
}

// doc is docs/uninstall.md's command blocks, by their step= tag, one
// command a line (comments dropped, continuation lines joined), and the
// tags in the page's order.
type doc struct {
	blocks map[string][]string
	order  []string
}

// path is the steps of one path (their tags begin with prefix) in the
// page's order, which must hold want: the test runs them as the page lists
// them, so a page that moved a step runs moved.
func (d doc) path(t *testing.T, prefix string, want ...string) []string {
	t.Helper()
	var out []string
	for _, s := range d.order {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	got := slices.Clone(out)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("docs/uninstall.md has the steps %v, the test knows %v", out, want)
	}
	return out
}

func steps(t *testing.T) doc {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "uninstall.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string][]string{}
	var (
		step, cont string
		order      []string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```sh step="):
			step = strings.TrimPrefix(line, "```sh step=")
			if _, dup := out[step]; dup {
				t.Fatalf("docs/uninstall.md: step %s twice", step)
			}
			out[step] = nil
			order = append(order, step)
			continue
		case line == "```":
			step = ""
			continue
		case step == "":
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`)
			continue
		}
		out[step] = append(out[step], cont+line)
		cont = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return doc{blocks: out, order: order}
}

// installation is the rendered base applied to the test cluster, and the
// operator running in this process as the base's ServiceAccount, with the
// base's RBAC and the Deployment's flags.
type installation struct {
	t    *testing.T
	c    client.Client
	objs []*unstructured.Unstructured
	// stop stops the operator (idempotent).
	stop func()
	// released is the output of the last release-finalizers.
	released bytes.Buffer
}

// install waits for a previous installation's Namespace and CRDs to be
// gone, applies the base server-side (the Namespace and CRDs first, as
// Argo CD's sync wave and Flux do) and starts the operator.
func install(t *testing.T) *installation {
	t.Helper()
	ctx := context.Background()
	c := testenv.Client()
	objs, err := gitops.Build(root, gitops.BaseDir)
	if err != nil {
		t.Fatal(err)
	}
	in := &installation{t: t, c: c, objs: objs, stop: func() {}}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Name: gitops.Namespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err) || err == nil && !in.terminating(gitops.Namespace), "a previous " + gitops.Namespace + " is still terminating"
	})
	first := func(u *unstructured.Unstructured) bool {
		return u.GetKind() == "Namespace" || u.GetKind() == "CustomResourceDefinition"
	}
	for _, wave := range []bool{true, false} {
		for _, u := range objs {
			if first(u) != wave {
				continue
			}
			err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
				client.ForceOwnership, client.FieldOwner("uninstall-test"))
			if err != nil {
				t.Fatalf("applying %s: %v", gitops.ID(u), err)
			}
		}
		if wave {
			in.waitEstablished()
		}
	}
	in.startOperator()
	t.Cleanup(in.stop)
	return in
}

func (in *installation) waitEstablished() {
	in.t.Helper()
	for _, u := range in.objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		eventually.That(in.t, time.Minute, func() (bool, string) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := in.c.Get(context.Background(), client.ObjectKey{Name: u.GetName()}, crd); err != nil {
				return false, err.Error()
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, ""
				}
			}
			return false, "CRD " + u.GetName() + " not Established"
		})
	}
}

// startOperator runs the manager as the Deployment would: its flags, then
// the test's (the last occurrence of a flag wins) — no listeners, the
// hypervisor kinds' reconcilers only, a short Lease and quick sweeps.
func (in *installation) startOperator() {
	t := in.t
	t.Helper()
	u := gitops.Find(in.objs, "Deployment", gitops.ManagerName)
	if u == nil {
		t.Fatalf("no Deployment %s", gitops.ManagerName)
	}
	dep := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dep); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(dep.Spec.Template.Spec.Containers[0].Args)
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("the manager's args %v do not start with run", args)
	}
	args = append(args[1:],
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--webhook-bind-address=0",
		"--operator-namespace="+gitops.Namespace,
		"--controllers="+strings.Join([]string{manager.ControllerHypervisorCluster,
			manager.ControllerHypervisorMachineTemplate, manager.ControllerMachineClaim, manager.ControllerOrphans}, ","),
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms",
		"--machine-observe-interval=1s", "--orphan-sweep-interval=2s")
	fs := flag.NewFlagSet("hyperfleet run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		logOpts logging.Options
		opts    manager.Options
	)
	logOpts.BindFlags(fs, "json")
	opts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("hyperfleet run %v: %v", args, err)
	}
	opts.Identity = "uninstall-test"
	if err := opts.Complete(); err != nil {
		t.Fatal(err)
	}
	// One process runs a manager per test.
	opts.SkipControllerNameValidation = true

	const sa = "hyperfleet-manager"
	cfg := testenv.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + gitops.Namespace + ":" + sa, Groups: []string{
		"system:serviceaccounts", "system:serviceaccounts:" + gitops.Namespace, "system:authenticated"}}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	select {
	case <-mgr.Elected():
	case err := <-done:
		t.Fatalf("the operator stopped before leading: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the operator did not lead within 2 minutes")
	}
	stopped := false
	in.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the operator stopped with %v", err)
		}
	}
}

func (in *installation) terminating(ns string) bool {
	n := &corev1.Namespace{}
	if err := in.c.Get(context.Background(), client.ObjectKey{Name: ns}, n); err != nil {
		return false
	}
	return n.DeletionTimestamp != nil
}

// gone waits for obj to be deleted.
func (in *installation) gone(obj client.Object, timeout time.Duration) {
	in.t.Helper()
	eventually.That(in.t, timeout, func() (bool, string) {
		err := in.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		why := fmt.Sprintf("finalizers %v", obj.GetFinalizers())
		if ns, ok := obj.(*corev1.Namespace); ok {
			why = fmt.Sprintf("conditions %v", ns.Status.Conditions)
		}
		return false, fmt.Sprintf("%T %s still there (%s, err %v)", obj, obj.GetName(), why, err)
	})
}
