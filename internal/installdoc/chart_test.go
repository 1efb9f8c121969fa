package installdoc_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// digestPlaceholder is what the page asks the reader to fill in.
const digestPlaceholder = "<a digest from hack/releases.yaml>"

// The page's Helm path: `helm install` from a checkout, as Helm does it —
// the chart rendered by Helm's engine with the line's --set values for the
// cluster's API versions (so the MachineClaim finalizer policy is rendered:
// the test cluster serves it), the namespace created (--create-namespace),
// crds/ applied and Established, then the templates, server-side — the
// namespace labelled as the page says, the Deployment's Pods running, the
// operator started with the rendered Deployment's flags turning a
// MachineClaim Ready on a Proxmox simulator, and the CRDs applied again as
// the page's upgrade step does.
//
// Not run: the release's chart from the OCI registry (none on a test
// cluster); its line must be the checkout's with the release's chart and
// version, the registry the one the release workflow pushes to.
func TestInstallWithTheChart(t *testing.T) {
	in := newInstallation(t)
	ctx := context.Background()
	doc := in.doc

	var fromCheckout, fromRegistry []string
	for _, step := range doc.Path(t, "helm", "helm1", "helm2", "helm3") {
		for _, line := range doc.Lines(t, step) {
			line = strings.ReplaceAll(line, digestPlaceholder, strings.Repeat("ab", 32))
			f := strings.Fields(line)
			switch {
			case step == "helm1" && len(f) > 3 && f[0] == "helm" && f[1] == "install" && strings.HasPrefix(f[3], "oci://"):
				fromRegistry = f
			case step == "helm1" && len(f) > 3 && f[0] == "helm" && f[1] == "install":
				fromCheckout = f
				in.helmInstall(f)
				in.running()
			case step == "helm2" && len(f) == 5 && strings.Join(f[:3], " ") == "kubectl label ns":
				k, v, _ := strings.Cut(f[4], "=")
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f[3]}}
				patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"`+k+`":"`+v+`"}}}`))
				if err := in.C.Patch(ctx, ns, patch); err != nil {
					t.Fatalf("step %s: %s: %v", step, line, err)
				}
				in.restricted(f[3])
			case step == "helm3" && len(f) == 5 && strings.Join(f[:4], " ") == "kubectl apply --server-side -f":
				in.applyCRDs(step, f[4])
			default:
				in.unknown(step, line)
			}
		}
	}
	if fromCheckout == nil || fromRegistry == nil {
		t.Fatalf("step helm1 has no helm install from a checkout (%v) or from the registry (%v)", fromCheckout, fromRegistry)
	}
	checkRegistryLine(t, fromRegistry, fromCheckout)

	in.reconciling()
}

// helmInstall does `helm install NAME CHART -n NS --create-namespace --set
// k=v...`.
func (in *installation) helmInstall(f []string) {
	t := in.T
	t.Helper()
	if f[2] != "hyperfleet" {
		t.Errorf("the release is %s; the page's other commands name hyperfleet", f[2])
	}
	if filepath.Clean(f[3]) != gitops.ChartDir {
		t.Fatalf("helm install %s: the test installs %s", f[3], gitops.ChartDir)
	}
	var ns string
	create := false
	values := map[string]any{}
	for i := 4; i < len(f); i++ {
		switch f[i] {
		case "-n", "--namespace":
			i++
			ns = f[i]
		case "--create-namespace":
			create = true
		case "--set":
			i++
			if err := strvals.ParseInto(f[i], values); err != nil {
				t.Fatalf("--set %s: %v", f[i], err)
			}
		default:
			t.Fatalf("helm install: the test does not know the flag %q", f[i])
		}
	}
	if ns != gitops.Namespace || !create {
		t.Fatalf("helm install into %q (--create-namespace %v); the page's other commands use %s", ns, create, gitops.Namespace)
	}
	ch, err := loader.Load(filepath.Join(root, f[3]))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := gitops.RenderChart(ch, ns, values, clusterCapabilities(t))
	if err != nil {
		t.Fatal(err)
	}
	if gitops.Find(objs, "MutatingAdmissionPolicy", "hyperfleet-machineclaim-finalizer") == nil {
		t.Errorf("the chart did not render the MachineClaim finalizer policy for a cluster serving %s: %v", gitops.FinalizerPolicyAPI, gitops.SortedIDs(objs))
	}
	if err := in.C.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatalf("--create-namespace: %v", err)
	}
	// Helm installs crds/ first and waits for them, then the templates.
	in.Apply(objs, func(u *unstructured.Unstructured) bool { return u.GetKind() == "CustomResourceDefinition" })
	in.applied(objs)
	dep := in.Deployment()
	if r, ok := values["replicas"].(int64); ok && int64(*dep.Spec.Replicas) != r {
		t.Errorf("--set replicas=%d, the Deployment has %d", r, *dep.Spec.Replicas)
	}
}

// restricted checks the namespace enforces the restricted Pod Security
// Standard once labelled: a privileged Pod is refused.
func (in *installation) restricted(ns string) {
	t := in.T
	t.Helper()
	bad := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: new(true)},
		}}},
	}
	if err := in.C.Create(context.Background(), bad, client.DryRunAll); err == nil {
		t.Errorf("namespace %s admits a privileged Pod after the label", ns)
	}
}

// applyCRDs applies every file of dir server-side, as `kubectl apply
// --server-side -f dir` does, and checks they are kustomize/crd's CRDs.
func (in *installation) applyCRDs(step, dir string) {
	t := in.T
	t.Helper()
	files, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, file := range files {
		for _, u := range decodeFile(t, filepath.Join(dir, file.Name())) {
			in.ApplyOne(u, false)
			got = append(got, gitops.ID(u))
		}
	}
	base, err := gitops.Build(root, gitops.CRDDir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := gitops.SortedIDs(base); !slices.Equal(got, want) {
		t.Errorf("step %s applies\n  %v\n%s holds\n  %v", step, got, gitops.CRDDir, want)
	}
}

// clusterCapabilities is what `helm install` discovers of the cluster: its
// version and the API versions and kinds it serves.
func clusterCapabilities(t *testing.T) *common.Capabilities {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(testenv.Config())
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	caps := common.DefaultCapabilities.Copy()
	var versions common.VersionSet
	for _, l := range lists {
		versions = append(versions, l.GroupVersion)
		for _, r := range l.APIResources {
			versions = append(versions, l.GroupVersion+"/"+r.Kind)
		}
	}
	caps.APIVersions = versions
	sv, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := common.ParseKubeVersion(sv.GitVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps.KubeVersion = *kv
	return caps
}

// checkRegistryLine checks the release's `helm install` is the checkout's
// but for the chart (the registry the release workflow pushes to) and
// --version, and the image digest (the release's chart pins its own).
func checkRegistryLine(t *testing.T, registry, checkout []string) {
	t.Helper()
	const chart = "oci://ghcr.io/hyperfleet/charts/hyperfleet"
	if registry[3] != chart {
		t.Errorf("the page installs %s, the release's chart is %s", registry[3], chart)
	}
	workflow, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yaml"))
	if err != nil || !strings.Contains(string(workflow), `helm push "dist/hyperfleet-${TAG#v}.tgz" "oci://ghcr.io/${OWNER,,}/charts"`) {
		t.Errorf("the release workflow does not push the chart to oci://ghcr.io/<owner>/charts (%v)", err)
	}
	var rest []string
	for i := 4; i < len(registry); i++ {
		if registry[i] == "--version" {
			i++
			if !strings.HasPrefix(registry[i], "1.") && !strings.HasPrefix(registry[i], "0.") {
				t.Errorf("--version %s is not a chart version (a release's tag without the v)", registry[i])
			}
			continue
		}
		rest = append(rest, registry[i])
	}
	var want []string
	for i := 4; i < len(checkout); i++ {
		if checkout[i] == "--set" && strings.HasPrefix(checkout[i+1], "image.digest=") {
			i++
			continue
		}
		want = append(want, checkout[i])
	}
	if !slices.Equal(rest, want) {
		t.Errorf("the release's helm install has the flags %v, the checkout's %v", rest, want)
	}
}
