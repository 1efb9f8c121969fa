package installdoc_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/internal/testenv/installtest"
)

// repoURL is this repository, as the Application and the GitRepository
// name it.
const repoURL = "https://github.com/hyperfleet/hyperfleet.git"

// The page's Kustomize path, with Argo CD: the overlay checked (built, the
// namespace created, and a server-side dry run of every object that creates
// nothing), Argo CD's health checks
// patched into argocd-cm, the Application applied, then its sync done as
// Argo CD does it — the overlay the Application names, built at that path,
// applied server-side by sync wave (the CRDs and the Namespace first,
// Established before the rest) — and the watch step's commands checked on
// the result: the Deployment's Pods running, the ExternalSecrets there, the
// Lease held by the operator, started with the Deployment's flags, which
// turns a MachineClaim Ready on a Proxmox simulator.
//
// Not run, for want of the real thing on a test cluster: Argo CD's
// controller (the test does its sync, and `argocd app get/wait` are checked
// to name the Application applied; its health is the Deployment's, the
// CRDs' and the Lease's checked here), the External Secrets Operator (the
// ExternalSecrets are applied against its CRD, not synced), and Flux: its
// step's files are copied as the page says, applied to the real Flux CRDs,
// and must name this repository at the Application's revision and path,
// with a GitRepository whose ignore rules keep every file the overlay
// builds from.
func TestInstallWithAnOverlay(t *testing.T) {
	in := newInstallation(t)
	ctx := context.Background()
	doc := in.doc

	// Before you start: check the overlay.
	var overlay string
	for _, line := range doc.Lines(t, "check") {
		f := strings.Fields(line)
		switch {
		case len(f) == 5 && f[0] == "kubectl" && f[1] == "kustomize" && f[3] == "|" && f[4] == "less":
			overlay = f[2]
			if objs, err := gitops.Build(root, overlay); err != nil || len(objs) == 0 {
				t.Fatalf("step check: kubectl kustomize %s: %d objects, %v", overlay, len(objs), err)
			}
		case len(f) == 4 && strings.Join(f[:3], " ") == "kubectl create namespace":
			if err := in.C.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f[3]}}); err != nil {
				t.Fatalf("step check: %s: %v", line, err)
			}
		case len(f) == 6 && strings.Join(f[:5], " ") == "kubectl apply --server-side --dry-run=server -k":
			objs, err := gitops.Build(root, f[5])
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range objs {
				in.ApplyOne(u, true)
			}
			if err := in.C.Get(ctx, client.ObjectKey{Namespace: gitops.Namespace, Name: gitops.ManagerName}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment"}}); !isNotFound(err) {
				t.Fatalf("step check: the dry run made the Deployment (%v)", err)
			}
		default:
			in.unknown("check", line)
		}
	}
	if overlay != "overlays/prod" {
		t.Fatalf("step check looks at %q; the test follows overlays/prod, as the page's other steps", overlay)
	}

	// Installing with Argo CD.
	var app *unstructured.Unstructured
	for _, step := range doc.Path(t, "argocd", "argocd1", "argocd2", "argocd3") {
		if step == "argocd3" {
			if app == nil {
				t.Fatal("no Application applied before step argocd3")
			}
			in.sync(app)
			in.running()
		}
		for _, line := range doc.Lines(t, step) {
			f := strings.Fields(line)
			switch {
			case step == "argocd1" && len(f) == 8 && strings.Join(f[:5], " ") == "kubectl -n argocd patch configmap" && f[6] == "--patch-file":
				in.patchArgoCDConfig(f[5], f[7])
			case step == "argocd2" && len(f) == 4 && strings.Join(f[:3], " ") == "kubectl apply -f":
				app = in.applyApplication(f[3])
			case step == "argocd3" && len(f) == 4 && f[0] == "argocd" && f[1] == "app" && f[2] == "get",
				step == "argocd3" && len(f) == 7 && f[0] == "argocd" && f[1] == "app" && f[2] == "wait" && f[4] == "--health" && f[5] == "--timeout":
				if f[3] != app.GetName() {
					t.Errorf("step %s: %q names the Application %s, step argocd2 applied %s", step, line, f[3], app.GetName())
				}
			case step == "argocd3" && len(f) == 5 && strings.Join(f[:2], " ") == "kubectl -n" && f[3] == "get":
				in.get(step, f[2], f[4])
			case step == "argocd3" && len(f) == 6 && f[0] == "kubectl" && f[1] == "-n" && f[3] == "get" && f[4] == "lease":
				in.leader(step, f[2], f[5])
			default:
				in.unknown(step, line)
			}
		}
	}
	in.applied(in.Objs)

	// Installing with Flux: the files the page copies, checked against the
	// Application's source.
	fleet := t.TempDir()
	var copied string
	for _, step := range doc.Path(t, "flux", "flux2", "flux4") {
		for _, line := range doc.Lines(t, step) {
			line = strings.ReplaceAll(line, "<cluster>", "test")
			f := strings.Fields(line)
			switch {
			case step == "flux2" && len(f) == 3 && f[0] == "mkdir" && f[1] == "-p":
				if err := os.MkdirAll(filepath.Join(fleet, f[2]), 0o750); err != nil {
					t.Fatal(err)
				}
			case step == "flux2" && len(f) == 3 && f[0] == "cp":
				copied = strings.TrimSuffix(f[2], "/")
				files, err := filepath.Glob(filepath.Join(root, f[1]))
				if err != nil || len(files) == 0 {
					t.Fatalf("step %s: %s copies nothing (%v)", step, line, err)
				}
				for _, file := range files {
					data, err := os.ReadFile(file)
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(fleet, copied, filepath.Base(file)), data, 0o600); err != nil {
						t.Fatalf("step %s: %v", step, err)
					}
				}
			case step == "flux4" && line == "flux reconcile source git flux-system",
				step == "flux4" && line == "flux get kustomizations --watch":
				// The fleet repository's source and Flux's Kustomizations:
				// checked below, on what the copied files apply.
			case step == "flux4" && len(f) == 5 && strings.Join(f[:2], " ") == "kubectl -n" && f[3] == "get":
				in.get(step, f[2], f[4])
			default:
				in.unknown(step, line)
			}
		}
	}
	if copied == "" {
		t.Fatal("step flux2 copies nothing")
	}
	in.checkFlux(fleet, copied, app)

	in.reconciling()
}

// sync does what Argo CD's sync of app does: build the overlay at the
// Application's path and apply it server-side, wave by wave (the CRDs and
// the Namespace carry wave -1).
func (in *installation) sync(app *unstructured.Unstructured) {
	t := in.T
	t.Helper()
	path, _, _ := unstructured.NestedString(app.Object, "spec", "source", "path")
	objs, err := gitops.Build(root, path)
	if err != nil {
		t.Fatalf("Application %s: building its path %s: %v", app.GetName(), path, err)
	}
	wave := func(u *unstructured.Unstructured) int {
		w, err := strconv.Atoi(u.GetAnnotations()["argocd.argoproj.io/sync-wave"])
		if err != nil {
			return 0
		}
		return w
	}
	for _, u := range objs {
		if (wave(u) < 0) != installtest.FirstByKind(u) {
			t.Errorf("%s is in sync wave %d; the page says the CRDs and the Namespace, and only they, come first", gitops.ID(u), wave(u))
		}
		if wave(u) > 0 {
			t.Errorf("%s is in sync wave %d, after the operator", gitops.ID(u), wave(u))
		}
	}
	in.Apply(objs, func(u *unstructured.Unstructured) bool { return wave(u) < 0 })
}

// patchArgoCDConfig patches file into the ConfigMap as `kubectl patch
// --patch-file` does (a strategic merge patch), on an argocd-cm as Argo
// CD's installation leaves it, and checks a health check per HyperFleet
// kind is there after.
func (in *installation) patchArgoCDConfig(name, file string) {
	t := in.T
	t.Helper()
	ctx := context.Background()
	if err := in.C.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd", Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"}},
		Data:       map[string]string{"admin.enabled": "true"},
	}
	if err := in.C.Create(ctx, cm); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.C.Patch(ctx, cm, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		t.Fatalf("kubectl -n argocd patch configmap %s --patch-file %s: %v", name, file, err)
	}
	kinds, err := gitops.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		group, kind, _ := strings.Cut(k, "_")
		if cm.Data[gitops.HealthKey(group, kind)] == "" {
			t.Errorf("argocd-cm has no health check for %s after the patch", k)
		}
	}
	if cm.Data["admin.enabled"] != "true" {
		t.Errorf("the patch dropped argocd-cm's own settings: %v", cm.Data)
	}
}

// applyApplication applies the Application file to the real Argo CD CRD
// and checks it syncs this repository's overlay, at main or a tag, into the
// operator's namespace, automatically.
func (in *installation) applyApplication(file string) *unstructured.Unstructured {
	t := in.T
	t.Helper()
	objs := decodeFile(t, file)
	if len(objs) != 1 || objs[0].GetKind() != "Application" {
		t.Fatalf("%s holds %d objects, want one Application", file, len(objs))
	}
	app := objs[0]
	in.ApplyOne(app, false)
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(app.Object, path...)
		return s
	}
	if got := str("spec", "source", "repoURL"); got != repoURL {
		t.Errorf("Application %s syncs %s, not this repository", app.GetName(), got)
	}
	checkRevision(t, "Application "+app.GetName(), str("spec", "source", "targetRevision"))
	if path := str("spec", "source", "path"); path != "overlays/prod" {
		t.Errorf("Application %s syncs %s; the page installs overlays/prod", app.GetName(), path)
	}
	if ns := str("spec", "destination", "namespace"); ns != gitops.Namespace {
		t.Errorf("Application %s syncs into %s", app.GetName(), ns)
	}
	if auto, _, _ := unstructured.NestedMap(app.Object, "spec", "syncPolicy", "automated"); auto["prune"] != true || auto["selfHeal"] != true {
		t.Errorf("Application %s syncs automated %v; the page says pruning and self-healing", app.GetName(), auto)
	}
	return app
}

// leader checks the Lease the page names is the operator's, held by the
// operator started here.
func (in *installation) leader(step, ns, name string) {
	t := in.T
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := in.C.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
		t.Fatalf("step %s: Lease %s/%s: %v", step, ns, name, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != in.Owner {
		t.Errorf("step %s: Lease %s/%s is held by %v, want the operator %s", step, ns, name, l.Spec.HolderIdentity, in.Owner)
	}
}

// checkFlux applies what Flux would apply from the fleet repository's
// copied folder (its kustomization.yaml builds it) to the real Flux CRDs,
// and checks it is the Application's installation: this repository at the
// same revision, the same overlay, which builds from the folders the
// GitRepository keeps; the resources wait for the operator.
func (in *installation) checkFlux(fleet, copied string, app *unstructured.Unstructured) {
	t := in.T
	t.Helper()
	if err := in.C.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	objs, err := gitops.Build(fleet, copied)
	if err != nil {
		t.Fatalf("the copied %s does not build: %v", copied, err)
	}
	for _, u := range objs {
		in.ApplyOne(u, false)
	}
	source := gitops.Find(objs, "GitRepository", "hyperfleet")
	operator := gitops.Find(objs, "Kustomization", "hyperfleet-operator")
	resources := gitops.Find(objs, "Kustomization", "hyperfleet-resources")
	if source == nil || operator == nil || resources == nil {
		t.Fatalf("%s lacks the GitRepository hyperfleet or a Kustomization hyperfleet-operator or hyperfleet-resources: %v", copied, gitops.SortedIDs(objs))
	}
	str := func(u *unstructured.Unstructured, path ...string) string {
		s, _, _ := unstructured.NestedString(u.Object, path...)
		return s
	}
	if got := str(source, "spec", "url"); got != repoURL {
		t.Errorf("GitRepository hyperfleet fetches %s, not this repository", got)
	}
	rev := str(source, "spec", "ref", "branch")
	if rev == "" {
		rev = str(source, "spec", "ref", "tag")
	}
	if appRev := str(app, "spec", "source", "targetRevision"); rev != appRev {
		t.Errorf("GitRepository hyperfleet is at %q, the Application at %q", rev, appRev)
	}
	if str(operator, "spec", "sourceRef", "name") != "hyperfleet" || operator.Object["spec"].(map[string]any)["wait"] != true {
		t.Errorf("Kustomization hyperfleet-operator: %v; want the GitRepository hyperfleet, with wait", operator.Object["spec"])
	}
	path := strings.TrimPrefix(str(operator, "spec", "path"), "./")
	if appPath := str(app, "spec", "source", "path"); path != appPath {
		t.Errorf("Kustomization hyperfleet-operator applies %s, the Application %s", path, appPath)
	}
	deps, _, _ := unstructured.NestedSlice(resources.Object, "spec", "dependsOn")
	if len(deps) != 1 || deps[0].(map[string]any)["name"] != "hyperfleet-operator" || str(resources, "spec", "sourceRef", "name") != "flux-system" {
		t.Errorf("Kustomization hyperfleet-resources: %v; want it to depend on hyperfleet-operator and read the fleet repository", resources.Object["spec"])
	}

	// The GitRepository's ignore rules keep only some folders: the overlay
	// must build from them alone, to the objects installed above.
	kept := t.TempDir()
	for _, rule := range strings.Split(str(source, "spec", "ignore"), "\n") {
		rule = strings.TrimSpace(rule)
		if !strings.HasPrefix(rule, "!/") {
			continue
		}
		dir := strings.Trim(strings.TrimPrefix(rule, "!/"), "/")
		if err := os.CopyFS(filepath.Join(kept, dir), os.DirFS(filepath.Join(root, dir))); err != nil {
			t.Fatalf("GitRepository hyperfleet keeps %s: %v", dir, err)
		}
	}
	fetched, err := gitops.Build(kept, path)
	if err != nil {
		t.Fatalf("%s does not build from what GitRepository hyperfleet fetches: %v", path, err)
	}
	if got, want := gitops.SortedIDs(fetched), gitops.SortedIDs(in.Objs); !slices.Equal(got, want) {
		t.Errorf("Flux would apply\n  %v\nthe Application installed\n  %v", got, want)
	}
}

// checkRevision checks a GitOps object follows main or a release tag.
func checkRevision(t *testing.T, what, rev string) {
	t.Helper()
	if rev != "main" && !strings.HasPrefix(rev, "v") {
		t.Errorf("%s is at %q: the page says main until the first release, then a tag", what, rev)
	}
}

func decodeFile(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(file, data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
