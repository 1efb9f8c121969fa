package installdoc_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/internal/testenv/installtest"
)

// root is the repository, seen from this package's folder.
const root = "../.."

// page is the page the tests follow.
const page = "docs/install.md"

// The suite runs on a whole cluster — the scheduler, the Deployment
// controller and KWOK's kubelets run the manager's Pods, the namespace
// controller really deletes a namespace between the tests — with the real
// ExternalSecret, prometheus-operator, Flux and Argo CD CRDs the overlays
// and the GitOps objects need (their controllers are not there).
func TestMain(m *testing.M) {
	testenv.MainWith(m, testcluster.Around(testenv.Config, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		return func() {}, testenv.InstallThirdPartyCRDs()
	}))
}

// Every marked block of the page is one the tests run: a new block fails
// here until a test runs it.
func TestEveryStepIsRun(t *testing.T) {
	installtest.ReadDoc(t, root, page).Path(t, "",
		"argocd1", "argocd2", "argocd3", "check", "flux2", "flux4", "helm1", "helm2", "helm3")
}

// installation is the page's installation on the test cluster, and what the
// test knows of it from the page.
type installation struct {
	*installtest.Installation
	doc installtest.Doc
}

func newInstallation(t *testing.T) *installation {
	t.Helper()
	in := &installation{Installation: installtest.New(t, "installdoc-test"), doc: installtest.ReadDoc(t, root, page)}
	t.Cleanup(in.remove)
	return in
}

// unknown fails on a line of the page the test does not know: the page
// holds only what is run.
func (in *installation) unknown(step, line string) {
	in.T.Helper()
	in.T.Fatalf("%s step %s: the test does not know the command %q", page, step, line)
}

// running waits for what makes the installation a running operator: the
// Deployment's Pods running and available (KWOK plays their kubelet), then
// the operator itself, started in this process with the Deployment's flags
// and as its ServiceAccount, leading.
func (in *installation) running() {
	in.T.Helper()
	want := in.Deployment()
	eventually.That(in.T, 2*time.Minute, func() (bool, string) {
		dep := want.DeepCopy()
		if err := in.C.Get(context.Background(), client.ObjectKeyFromObject(dep), dep); err != nil {
			return false, err.Error()
		}
		return dep.Status.ObservedGeneration == dep.Generation && dep.Status.AvailableReplicas == *dep.Spec.Replicas,
			fmt.Sprintf("Deployment %s: %d of %d replicas available", dep.Name, dep.Status.AvailableReplicas, *dep.Spec.Replicas)
	})
	in.StartOperator()
}

// reconciling proves the operator reconciles: a HypervisorCluster on a
// Proxmox simulator, with its credentials, and a MachineClaim that turns
// Ready with a VM; then the claim and the cluster deleted, and released by
// the operator (the VM deleted), so nothing is left for the next test.
func (in *installation) reconciling() {
	t := in.T
	t.Helper()
	lab := hypervisorlab.Proxmox(t)
	mc := &hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-1"},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
	}
	lab.Create(mc)
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		if err := lab.Get(mc); err != nil {
			return false, err.Error()
		}
		return mc.Status.Phase == hypervisorv1alpha1.MachineReady && slices.Contains(mc.Finalizers, hypervisorv1alpha1.MachineClaimFinalizer),
			mc.Name + ": " + hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions)
	})
	if n := len(lab.OwnedVMs()); n != 1 {
		t.Fatalf("%d VMs on the simulator, want 1", n)
	}
	for _, obj := range []client.Object{
		mc,
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: lab.NS}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve", Namespace: lab.NS}},
	} {
		if err := in.C.Delete(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
		in.Gone(obj, time.Minute)
	}
	if vms := lab.OwnedVMs(); len(vms) != 0 {
		t.Errorf("VMs left on the simulator: %v", vms)
	}
}

// remove takes the installation away for the next test: the operator
// stopped, every object applied deleted — the CRDs and the Namespace too —
// and gone.
func (in *installation) remove() {
	in.Stop()
	ctx := context.Background()
	for _, u := range in.Objs {
		if err := in.C.Delete(ctx, u.DeepCopy(), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !isNotFound(err) {
			in.T.Errorf("removing %s: %v", gitops.ID(u), err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gitops.Namespace}}
	if err := in.C.Delete(ctx, ns); err != nil && !isNotFound(err) {
		in.T.Errorf("removing namespace %s: %v", gitops.Namespace, err)
	}
	in.Gone(ns, 2*time.Minute)
	for _, u := range in.Objs {
		if u.GetKind() == "CustomResourceDefinition" {
			in.releaseInstances(u.GetName())
			// The API server deletes a CRD's objects before the CRD
			// (customresourcecleanup); on two loaded cores that took over a
			// minute once.
			in.Gone(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: u.GetName()}}, 3*time.Minute)
		}
	}
}

// releaseInstances takes the finalizers off what is left of a deleted
// CRD's objects: the operator is stopped, so an object it had put its
// finalizer on (a sample it reconciled before the test ended) would hold
// the CRD's deletion, and the next test's CRDs, for ever.
func (in *installation) releaseInstances(name string) {
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := in.C.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return
	}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.ListKind})
		if err := in.C.List(ctx, list); err != nil {
			continue
		}
		for i := range list.Items {
			item := &list.Items[i]
			if len(item.GetFinalizers()) == 0 {
				continue
			}
			patch := client.MergeFrom(item.DeepCopy())
			item.SetFinalizers(nil)
			if err := in.C.Patch(ctx, item, patch); err != nil && !isNotFound(err) {
				in.T.Errorf("releasing %s %s/%s: %v", crd.Spec.Names.Kind, item.GetNamespace(), item.GetName(), err)
			}
		}
		return
	}
}

// applied checks every object of objs is on the cluster as applied: each
// exists, and the manager's Deployment runs the rendered args.
func (in *installation) applied(objs []*unstructured.Unstructured) {
	in.T.Helper()
	for _, u := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := in.C.Get(context.Background(), client.ObjectKeyFromObject(u), got); err != nil {
			in.T.Errorf("%s is not on the cluster: %v", gitops.ID(u), err)
		}
	}
	dep := in.Deployment()
	onCluster := dep.DeepCopy()
	if err := in.C.Get(context.Background(), client.ObjectKeyFromObject(dep), onCluster); err != nil {
		in.T.Fatal(err)
	}
	if got, want := onCluster.Spec.Template.Spec.Containers[0].Args, dep.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, want) {
		in.T.Errorf("the Deployment on the cluster runs %v, the rendering %v", got, want)
	}
}

// get checks `kubectl -n NS get deploy,pods,externalsecrets` shows the
// installation: the Deployment with every replica available, as many Pods
// running and Ready, and the ExternalSecrets the installation holds (their
// controller is not on the test cluster, so they are listed, not synced).
func (in *installation) get(step, ns, resources string) {
	t := in.T
	t.Helper()
	ctx := context.Background()
	dep := in.Deployment()
	for _, r := range strings.Split(resources, ",") {
		switch r {
		case "deploy":
			if err := in.C.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil || dep.Status.AvailableReplicas != *dep.Spec.Replicas {
				t.Errorf("step %s: Deployment %s/%s: %v, %d of %d available", step, ns, dep.Name, err, dep.Status.AvailableReplicas, *dep.Spec.Replicas)
			}
		case "pods":
			pods := &corev1.PodList{}
			if err := in.C.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(dep.Spec.Selector.MatchLabels)); err != nil {
				t.Fatal(err)
			}
			ready := 0
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.Phase == corev1.PodRunning {
						ready++
					}
				}
			}
			if ready != int(*dep.Spec.Replicas) {
				t.Errorf("step %s: %d of the manager's Pods running and Ready, want %d", step, ready, *dep.Spec.Replicas)
			}
		case "externalsecrets":
			var want []string
			for _, u := range in.Objs {
				if u.GetKind() == "ExternalSecret" {
					want = append(want, u.GetName())
				}
			}
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion("external-secrets.io/v1")
			l.SetKind("ExternalSecretList")
			if err := in.C.List(ctx, l, client.InNamespace(ns)); err != nil {
				t.Fatalf("step %s: listing ExternalSecrets: %v", step, err)
			}
			var got []string
			for _, u := range l.Items {
				got = append(got, u.GetName())
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("step %s: ExternalSecrets %v, the installation has %v", step, got, want)
			}
		default:
			t.Fatalf("step %s: the test does not know the resource %q", step, r)
		}
	}
}

func isNotFound(err error) bool { return client.IgnoreNotFound(err) == nil }
