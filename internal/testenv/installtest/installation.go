package installtest

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/logging"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// Installation is HyperFleet installed on the test cluster: the objects
// applied (Objs), and the operator running in this process as the
// installed Deployment's ServiceAccount, with its RBAC and flags.
type Installation struct {
	T *testing.T
	C client.Client
	// Objs are the objects applied, in the order they were.
	Objs []*unstructured.Unstructured
	// Owner is the field manager of the applies and the operator's
	// leader-election identity.
	Owner string
	stop  func()
}

// New waits for a previous installation's Namespace to be gone (a whole
// test cluster's namespace controller deletes it) and returns an
// installation with nothing applied yet; the operator, once started, is
// stopped when the test ends.
func New(t *testing.T, owner string) *Installation {
	t.Helper()
	in := &Installation{T: t, C: testenv.Client(), Owner: owner, stop: func() {}}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		err := in.C.Get(context.Background(), client.ObjectKey{Name: gitops.Namespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err) || err == nil && !in.Terminating(gitops.Namespace), "a previous " + gitops.Namespace + " is still terminating"
	})
	t.Cleanup(func() { in.Stop() })
	return in
}

// FirstByKind is what Flux and the uninstall test apply first: the
// Namespaces and the CRDs (Argo CD's sync wave -1 holds the same).
func FirstByKind(u *unstructured.Unstructured) bool {
	return u.GetKind() == "Namespace" || u.GetKind() == "CustomResourceDefinition"
}

// Apply applies objs server-side in two waves, those first() holds, then
// the CRDs among them Established, the rest; it adds them to Objs.
func (in *Installation) Apply(objs []*unstructured.Unstructured, first func(*unstructured.Unstructured) bool) {
	in.T.Helper()
	for _, wave := range []bool{true, false} {
		for _, u := range objs {
			if first(u) != wave {
				continue
			}
			in.ApplyOne(u, false)
		}
		if wave {
			in.WaitEstablished(objs)
		}
	}
	in.Objs = append(in.Objs, objs...)
}

// ApplyOne applies u server-side, forcing ownership, as a dry run or for
// real.
func (in *Installation) ApplyOne(u *unstructured.Unstructured, dryRun bool) {
	in.T.Helper()
	opts := []client.ApplyOption{client.ForceOwnership, client.FieldOwner(in.Owner)}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	if err := in.C.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u.DeepCopy()), opts...); err != nil {
		in.T.Fatalf("applying %s (dry run %v): %v", gitops.ID(u), dryRun, err)
	}
}

// WaitEstablished waits for every CRD of objs to be Established.
func (in *Installation) WaitEstablished(objs []*unstructured.Unstructured) {
	in.T.Helper()
	for _, u := range objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		eventually.That(in.T, time.Minute, func() (bool, string) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := in.C.Get(context.Background(), client.ObjectKey{Name: u.GetName()}, crd); err != nil {
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

// Deployment is the manager's Deployment among Objs.
func (in *Installation) Deployment() *appsv1.Deployment {
	in.T.Helper()
	u := gitops.Find(in.Objs, "Deployment", gitops.ManagerName)
	if u == nil {
		in.T.Fatalf("no Deployment %s", gitops.ManagerName)
	}
	dep := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dep); err != nil {
		in.T.Fatal(err)
	}
	return dep
}

// StartOperator runs the manager as the Deployment would: its flags, then
// the test's (the last occurrence of a flag wins) — no listeners, the
// hypervisor kinds' reconcilers only, a short Lease and quick sweeps — as
// its ServiceAccount, and waits for it to lead.
func (in *Installation) StartOperator() {
	t := in.T
	t.Helper()
	dep := in.Deployment()
	args := slices.Clone(dep.Spec.Template.Spec.Containers[0].Args)
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("the manager's args %v do not start with run", args)
	}
	args = append(args[1:],
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--webhook-bind-address=0",
		"--operator-namespace="+dep.Namespace,
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
	opts.Identity = in.Owner
	if err := opts.Complete(); err != nil {
		t.Fatal(err)
	}
	// One process runs a manager per test.
	opts.SkipControllerNameValidation = true

	sa := dep.Spec.Template.Spec.ServiceAccountName
	cfg := testenv.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + dep.Namespace + ":" + sa, Groups: []string{
		"system:serviceaccounts", "system:serviceaccounts:" + dep.Namespace, "system:authenticated"}}
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

// Stop stops the operator (idempotent).
func (in *Installation) Stop() { in.stop() }

// Terminating tells whether namespace ns is being deleted.
func (in *Installation) Terminating(ns string) bool {
	n := &corev1.Namespace{}
	if err := in.C.Get(context.Background(), client.ObjectKey{Name: ns}, n); err != nil {
		return false
	}
	return n.DeletionTimestamp != nil
}

// Gone waits for obj to be deleted.
func (in *Installation) Gone(obj client.Object, timeout time.Duration) {
	in.T.Helper()
	eventually.That(in.T, timeout, func() (bool, string) {
		err := in.C.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
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
