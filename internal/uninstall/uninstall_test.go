package uninstall_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/internal/uninstall"
)

// Path A of docs/uninstall.md, step by step, on the base installed and
// running: two MachineClaims Ready on a Proxmox simulator through a
// HypervisorCluster whose credentials the cluster holds. It ends with no
// HyperFleet CRD, no VM left on the simulator, and every namespace —
// the operator's and the user's — gone, none stuck Terminating.
func TestRemoveEverything(t *testing.T) {
	doc := steps(t)
	in := install(t)
	lab := hypervisorlab.Proxmox(t)
	claims := readyClaims(t, lab, "runner-1", "runner-2")
	if n := len(lab.OwnedVMs()); n != len(claims) {
		t.Fatalf("%d VMs on the simulator, want %d", n, len(claims))
	}

	for _, step := range doc.Path(t, "a", "a1", "a2", "a3", "a4", "a5", "a6") {
		in.run(step, doc.Blocks[step], lab.NS, nil)
		if step == "a2" && len(lab.OwnedVMs()) != 0 {
			t.Errorf("after step a2 the simulator still has %v", lab.OwnedVMs())
		}
	}

	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := in.C.List(context.Background(), crds); err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds.Items {
		if isOurs(crd.Spec.Group) {
			t.Errorf("CRD %s is left", crd.Name)
		}
	}
	if vms := lab.OwnedVMs(); len(vms) != 0 {
		t.Errorf("VMs left on the simulator: %v", vms)
	}
	// The user's namespace goes too: nothing in it waits for the operator.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lab.NS}}
	if err := in.C.Delete(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	in.Gone(ns, time.Minute)
	in.Gone(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gitops.Namespace}}, time.Minute)
	nsList := &corev1.NamespaceList{}
	if err := in.C.List(context.Background(), nsList); err != nil {
		t.Fatal(err)
	}
	for _, n := range nsList.Items {
		if n.DeletionTimestamp != nil {
			t.Errorf("namespace %s is stuck Terminating: %v", n.Name, n.Status.Conditions)
		}
	}
}

// Path B of docs/uninstall.md: the operator removed as the tools remove it
// (every object of the rendered install they do not keep), and the CRDs,
// the operator's Namespace (same UID: same installation id), every user
// object and every VM are still there. Then a user namespace is deleted:
// without the release step it stays Terminating — the wrong order, shown on
// the namespace controller's own condition — and the documented
// `hyperfleet release-finalizers` lets it finish, leaving the VMs on the
// simulator for a later sweep and naming them.
func TestRemoveTheOperatorKeepTheObjects(t *testing.T) {
	ctx := context.Background()
	doc := steps(t)
	in := install(t)
	lab := hypervisorlab.Proxmox(t)
	claims := readyClaims(t, lab, "runner-1", "runner-2")
	opNS := &corev1.Namespace{}
	if err := in.C.Get(ctx, client.ObjectKey{Name: gitops.Namespace}, opNS); err != nil {
		t.Fatal(err)
	}

	// While the operator runs, the release step refuses: the operator
	// releases what it made, deleting it.
	err := uninstall.Command([]string{"--namespace", lab.NS, "--dry-run"}, io.Discard, io.Discard, testConfig)
	if !errors.Is(err, uninstall.ErrOperatorRunning) {
		t.Fatalf("release-finalizers with the operator running: %v, want %v", err, uninstall.ErrOperatorRunning)
	}

	b := doc.Path(t, "b", "b1", "b2")
	in.run(b[0], doc.Blocks[b[0]], lab.NS, nil)

	// What stays: the CRDs, the Namespace, every user object with its
	// finalizers, every VM.
	for _, u := range in.Objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if err := in.C.Get(ctx, client.ObjectKey{Name: u.GetName()}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("CRD %s after step b1: %v", u.GetName(), err)
		}
	}
	kept := &corev1.Namespace{}
	if err := in.C.Get(ctx, client.ObjectKey{Name: gitops.Namespace}, kept); err != nil || kept.UID != opNS.UID || kept.DeletionTimestamp != nil {
		t.Errorf("namespace %s after step b1: %v (UID %s, was %s; deleting %v)", gitops.Namespace, err, kept.UID, opNS.UID, kept.DeletionTimestamp)
	}
	for _, obj := range append([]client.Object{
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-ca"}},
	}, claims...) {
		if err := lab.Get(obj); err != nil {
			t.Errorf("%T %s after step b1: %v", obj, obj.GetName(), err)
		} else if obj.GetDeletionTimestamp() != nil {
			t.Errorf("%T %s is being deleted after step b1", obj, obj.GetName())
		}
	}
	if n := len(lab.OwnedVMs()); n != len(claims) {
		t.Errorf("%d VMs on the simulator after step b1, want %d", n, len(claims))
	}
	if t.Failed() {
		t.FailNow()
	}

	// Step b2, line by line; after its first line (the namespace deleted,
	// nothing released yet) the namespace must be stuck.
	in.run(b[1], doc.Blocks[b[1]], lab.NS, func(i int) {
		if i != 0 {
			return
		}
		stuck(t, in, lab.NS)
	})

	out := in.released.String()
	for _, obj := range claims {
		mc := obj.(*hypervisorv1alpha1.MachineClaim)
		if !strings.Contains(out, "MachineClaim "+lab.NS+"/"+mc.Name) || !strings.Contains(out, mc.Status.ProviderID) {
			t.Errorf("release-finalizers did not name claim %s and its machine %s:\n%s", mc.Name, mc.Status.ProviderID, out)
		}
	}
	// The machines are left on the hypervisor, marked for a later sweep.
	if n := len(lab.OwnedVMs()); n != len(claims) {
		t.Errorf("%d VMs on the simulator after the release, want the %d left for a sweep", n, len(claims))
	}
	for _, vm := range lab.OwnedVMs() {
		if !slices.Contains(vm.Tags, "hf-inst-"+string(opNS.UID)) {
			t.Errorf("VM %d has tags %v, without hf-inst-<UID of %s> to be found by", vm.VMID, vm.Tags, gitops.Namespace)
		}
	}
}

// stuck checks the wrong order: the namespace deleted with the operator
// gone and nothing released stays Terminating, the namespace controller
// reporting HyperFleet's finalizers as what remains — and still is a few
// seconds later.
func stuck(t *testing.T, in *installation, ns string) {
	t.Helper()
	var last string
	remaining := func() bool {
		n := &corev1.Namespace{}
		if err := in.C.Get(context.Background(), client.ObjectKey{Name: ns}, n); err != nil {
			last = err.Error()
			return false
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NamespaceFinalizersRemaining && c.Status == corev1.ConditionTrue {
				last = c.Message
				return n.DeletionTimestamp != nil && strings.Contains(c.Message, hypervisorv1alpha1.MachineClaimFinalizer) &&
					strings.Contains(c.Message, "hypervisor.hyperfleet.io/hypervisorcluster")
			}
		}
		last = fmt.Sprintf("conditions %v", n.Status.Conditions)
		return false
	}
	eventually.That(t, time.Minute, func() (bool, string) { return remaining(), last })
	time.Sleep(3 * time.Second)
	if !remaining() {
		t.Fatalf("namespace %s did not stay Terminating without the release step: %s", ns, last)
	}
	t.Logf("wrong order: namespace %s stays Terminating: %s", ns, last)
}

func testConfig(string) (*rest.Config, error) { return testenv.Config(), nil }

func isOurs(group string) bool {
	return group == hypervisorv1alpha1.GroupVersion.Group || group == "cyberdesk.io" || group == "hourglass.eigenlayer.io"
}

// readyClaims makes MachineClaims from the lab's template and waits for
// them to be Ready (a VM running on the simulator each).
func readyClaims(t *testing.T, lab *hypervisorlab.Lab, names ...string) []client.Object {
	t.Helper()
	var out []client.Object
	for _, name := range names {
		mc := &hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
		}
		lab.Create(mc)
		out = append(out, mc)
	}
	for _, obj := range out {
		mc := obj.(*hypervisorv1alpha1.MachineClaim)
		eventually.That(t, 2*time.Minute, func() (bool, string) {
			if err := lab.Get(mc); err != nil {
				return false, err.Error()
			}
			return mc.Status.Phase == hypervisorv1alpha1.MachineReady && slices.Contains(mc.Finalizers, hypervisorv1alpha1.MachineClaimFinalizer),
				mc.Name + ": " + hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions)
		})
	}
	return out
}

// run performs one step of docs/uninstall.md, each line as the tool it
// names would, on the test cluster; after reports each line done. A line
// the test does not know fails it: the page holds only what is tested.
func (in *installation) run(step string, lines []string, ns string, after func(i int)) {
	t := in.T
	t.Helper()
	if len(lines) == 0 {
		t.Fatalf("docs/uninstall.md has no step %s", step)
	}
	if step == "a4" || step == "b1" {
		in.removeOperator(step, lines)
		return
	}
	for i, line := range lines {
		line = strings.ReplaceAll(line, "<namespace>", ns)
		in.do(step, line)
		if after != nil {
			after(i)
		}
	}
}

func (in *installation) do(step, line string) {
	t := in.T
	t.Helper()
	ctx := context.Background()
	f := strings.Fields(line)
	flags := map[string]string{}
	var args []string
	for _, a := range f {
		if strings.HasPrefix(a, "--") {
			k, v, _ := strings.Cut(a, "=")
			flags[k] = v
		} else {
			args = append(args, a)
		}
	}
	switch {
	case len(args) >= 2 && args[0] == "hyperfleet" && args[1] == "release-finalizers":
		in.released.Reset()
		if err := uninstall.Command(f[2:], &in.released, io.Discard, testConfig); err != nil {
			t.Fatalf("step %s: %s: %v", step, line, err)
		}
		t.Logf("step %s: %s:\n%s", step, line, in.released.String())

	case len(args) >= 3 && args[0] == "kubectl" && args[1] == "delete" && args[2] == "crd":
		names := args[3:]
		var want []string
		for _, u := range in.Objs {
			if u.GetKind() == "CustomResourceDefinition" {
				want = append(want, u.GetName())
			}
		}
		if !sameSet(names, want) {
			t.Fatalf("step %s deletes the CRDs %v, the installation has %v", step, names, want)
		}
		for _, name := range names {
			crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := in.C.Delete(ctx, crd); !deleted(err, flags) {
				t.Fatalf("step %s: deleting CRD %s: %v", step, name, err)
			}
			in.Gone(crd, time.Minute)
		}

	case len(args) == 4 && args[0] == "kubectl" && args[1] == "delete" && args[2] == "namespace":
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: args[3]}}
		if err := in.C.Delete(ctx, ns); !deleted(err, flags) {
			t.Fatalf("step %s: deleting namespace %s: %v", step, args[3], err)
		}
		if flags["--wait"] != "false" {
			in.Gone(ns, time.Minute)
		}

	case len(args) == 3 && args[0] == "kubectl" && args[1] == "wait" && flags["--for"] == "delete" && strings.HasPrefix(args[2], "namespace/"):
		in.Gone(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: strings.TrimPrefix(args[2], "namespace/")}}, time.Minute)

	case len(args) == 3 && args[0] == "kubectl" && args[1] == "delete" && hasFlag(flags, "--all") && hasFlag(flags, "--all-namespaces"):
		kinds := in.kinds(step, args[2])
		for _, gvk := range kinds {
			for _, u := range in.list(gvk) {
				if err := in.C.Delete(ctx, &u, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
					t.Fatalf("step %s: deleting %s %s/%s: %v", step, gvk.Kind, u.GetNamespace(), u.GetName(), err)
				}
			}
		}
		// kubectl waits for every object it deleted to be gone.
		eventually.That(t, time.Minute, func() (bool, string) {
			left := in.left(kinds)
			return len(left) == 0, fmt.Sprintf("step %s: still there: %v", step, left)
		})

	case len(args) == 3 && args[0] == "kubectl" && args[1] == "get" && hasFlag(flags, "--all-namespaces"):
		if left := in.left(in.kinds(step, args[2])); len(left) > 0 {
			t.Fatalf("step %s: %s lists %v, want no resources", step, line, left)
		}

	default:
		t.Fatalf("docs/uninstall.md step %s: the test does not know the command %q", step, line)
	}
}

// kinds maps kubectl's comma-separated resource names to the installation's
// kinds; every HyperFleet kind with objects of its own must be named once the
// step is about all of them.
func (in *installation) kinds(step, resources string) []schema.GroupVersionKind {
	t := in.T
	t.Helper()
	byPlural := map[string]schema.GroupVersionKind{}
	for _, u := range in.Objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		version, _, _ := unstructured.NestedString(versions[0].(map[string]any), "name")
		byPlural[plural] = schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
	}
	var out []schema.GroupVersionKind
	for _, r := range strings.Split(resources, ",") {
		gvk, ok := byPlural[r]
		if !ok {
			t.Fatalf("step %s names %q, not a resource of the installation's CRDs", step, r)
		}
		out = append(out, gvk)
	}
	return out
}

func (in *installation) list(gvk schema.GroupVersionKind) []unstructured.Unstructured {
	in.T.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := in.C.List(context.Background(), l); err != nil {
		in.T.Fatalf("listing %s: %v", gvk.Kind, err)
	}
	return l.Items
}

func (in *installation) left(kinds []schema.GroupVersionKind) []string {
	var out []string
	for _, gvk := range kinds {
		for _, u := range in.list(gvk) {
			out = append(out, fmt.Sprintf("%s %s/%s (finalizers %v)", gvk.Kind, u.GetNamespace(), u.GetName(), u.GetFinalizers()))
		}
	}
	return out
}

// removeOperator checks a step's commands are the four tools' ways of
// removing the installation, and does what they do: stop the operator and
// delete every object of the rendered install the tools do not keep —
// Argo CD deleting the Application (not the objects with Delete=false),
// Flux pruning the Kustomization's inventory (not those with prune:
// disabled); Helm's chart has no Namespace and keeps its CRDs, and
// `kubectl delete deployment` deletes less. Both tools must keep the same
// objects: the CRDs and the Namespace.
func (in *installation) removeOperator(step string, lines []string) {
	t := in.T
	t.Helper()
	seen := map[string]bool{}
	for _, line := range lines {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "kubectl -n argocd delete application "):
			app := f[len(f)-1]
			if _, err := os.Stat(filepath.Join(root, "argocd", "applications", app+".yaml")); err != nil {
				t.Errorf("step %s deletes the Application %s, which argocd/applications does not hold: %v", step, app, err)
			}
			seen["argocd"] = true
		case strings.HasPrefix(line, "flux delete kustomization hyperfleet-operator --namespace flux-system"):
			data, err := os.ReadFile(filepath.Join(root, "flux", "prod", "operator.yaml"))
			if err != nil || !strings.Contains(string(data), "name: hyperfleet-operator\n  namespace: flux-system") {
				t.Errorf("step %s deletes the Kustomization flux-system/hyperfleet-operator, which flux/prod does not hold (%v)", step, err)
			}
			seen["flux"] = true
		case line == "helm uninstall hyperfleet --namespace "+gitops.Namespace:
			seen["helm"] = true
		case line == "kubectl -n "+gitops.Namespace+" delete deployment "+gitops.ManagerName:
			seen["kubectl"] = true
		case strings.HasPrefix(line, "kubectl delete -k overlays/") && step == "a4":
			// Deletes the CRDs and the Namespace too: the step after
			// deletes them anyway, --ignore-not-found.
			seen["kubectl"] = true
		default:
			t.Fatalf("docs/uninstall.md step %s: the test does not know the command %q", step, line)
		}
	}
	for _, tool := range []string{"argocd", "flux", "helm", "kubectl"} {
		if !seen[tool] {
			t.Errorf("step %s says nothing for %s", step, tool)
		}
	}

	in.Stop()
	keptBy := func(u *unstructured.Unstructured) (argo, flux bool) {
		a := u.GetAnnotations()
		for _, o := range strings.Split(a["argocd.argoproj.io/sync-options"], ",") {
			if strings.TrimSpace(o) == "Delete=false" {
				argo = true
			}
		}
		return argo, a["kustomize.toolkit.fluxcd.io/prune"] == "disabled"
	}
	var kept []string
	for _, u := range in.Objs {
		argo, flux := keptBy(u)
		if argo != flux {
			t.Errorf("%s: kept by Argo CD %v, by Flux %v", gitops.ID(u), argo, flux)
		}
		if argo || flux {
			kept = append(kept, u.GetKind())
			continue
		}
		obj := u.DeepCopy()
		if err := in.C.Delete(context.Background(), obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("step %s: deleting %s: %v", step, gitops.ID(u), err)
		}
	}
	sort.Strings(kept)
	kept = slices.Compact(kept)
	if !slices.Equal(kept, []string{"CustomResourceDefinition", "Namespace"}) {
		t.Errorf("the tools keep the kinds %v, want the CRDs and the Namespace", kept)
	}
}

// deleted tells whether a delete went as kubectl would have it: done, or
// not found with --ignore-not-found.
func deleted(err error, flags map[string]string) bool {
	return err == nil || apierrors.IsNotFound(err) && hasFlag(flags, "--ignore-not-found")
}

func hasFlag(flags map[string]string, name string) bool {
	v, ok := flags[name]
	return ok && (v == "" || v == "true")
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	sort.Strings(a)
	sort.Strings(b)
	return slices.Equal(a, b)
}
