package gitops_test

import (
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/logging"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/providers/github/webhook"
)

const image = "ghcr.io/hyperfleet/hyperfleet"

// What each environment must get.
var environments = map[string]struct {
	replicas   int32
	logLevel   string
	store      string
	image      *regexp.Regexp
	monitoring bool
}{
	"dev": {1, "debug", "hyperfleet-dev", regexp.MustCompile(`^` + image + `:[\w][\w.-]*$`), false},
	// Staging follows main or a release tag, prod main (before the first
	// release) or a release's digest; hack/pins (make verify) checks that
	// the tag or digest is a release's.
	"staging": {1, "info", "hyperfleet-staging", regexp.MustCompile(`^` + image + `:(main|v\d+\.\d+\.\d+)$`), true},
	"prod":    {2, "info", "hyperfleet-prod", regexp.MustCompile(`^` + image + `(:main|@sha256:[0-9a-f]{64})$`), true},
}

// The credentials each overlay syncs: ExternalSecret (and Secret) name → keys.
var credentials = map[string][]string{
	"proxmox-credentials":     {"tokenID", "tokenSecret"},
	"github-app-credentials":  {"appID", "installationID", "privateKey"},
	"github-webhook-secret":   {"webhookSecret"},
	"supabase-credentials":    {"url", "key"},
	"hourglass-operator-keys": {"ecdsa.key", "bls.key"},
}

func decode[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s: %v", gitops.ID(u), err)
	}
	return out
}

func managerContainer(t *testing.T, objs []*unstructured.Unstructured) (*appsv1.Deployment, corev1.Container) {
	t.Helper()
	u := gitops.Find(objs, "Deployment", gitops.ManagerName)
	if u == nil {
		t.Fatalf("no Deployment %s", gitops.ManagerName)
	}
	dep := decode[appsv1.Deployment](t, u)
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name == "manager" {
			return dep, c
		}
	}
	t.Fatal("the Deployment has no container manager")
	return nil, corev1.Container{}
}

// parseRunFlags parses args as `hyperfleet run` does (cmd/hyperfleet/run.go),
// so a misspelt or removed flag fails here rather than in a crash loop.
func parseRunFlags(t *testing.T, args []string) manager.Options {
	t.Helper()
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("args %v do not start with the run command", args)
	}
	fs := flag.NewFlagSet("hyperfleet run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		logOpts logging.Options
		mgrOpts manager.Options
	)
	fs.String("kubeconfig", "", "")
	logOpts.BindFlags(fs, "json")
	mgrOpts.BindFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("hyperfleet %s: %v", strings.Join(args, " "), err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("stray arguments %v", fs.Args())
	}
	if _, err := logging.New(logOpts); err != nil {
		t.Fatalf("log flags: %v", err)
	}
	return mgrOpts
}

func TestOverlays(t *testing.T) {
	for env, want := range environments {
		t.Run(env, func(t *testing.T) {
			objs := built(t, "overlays/"+env)
			dep, c := managerContainer(t, objs)
			if got := *dep.Spec.Replicas; got != want.replicas {
				t.Errorf("replicas = %d, want %d", got, want.replicas)
			}
			if !want.image.MatchString(c.Image) {
				t.Errorf("image %s does not match %s", c.Image, want.image)
			}
			opts := parseRunFlags(t, c.Args)
			if !opts.LeaderElect {
				t.Error("leader election is off")
			}
			if opts.MetricsAddr != ":8443" || !opts.MetricsSecure || opts.ProbeAddr != ":8081" {
				t.Errorf("metrics %q secure=%v, probes %q; want :8443, true, :8081", opts.MetricsAddr, opts.MetricsSecure, opts.ProbeAddr)
			}
			if !slices.Contains(c.Args, "--log-level="+want.logLevel) {
				t.Errorf("args %v lack --log-level=%s", c.Args, want.logLevel)
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if c.Resources.Requests.Name(r, "").IsZero() || c.Resources.Limits.Name(r, "").IsZero() {
					t.Errorf("the %s request or limit is not set", r)
				}
			}
			checkExternalSecrets(t, objs, want.store, opts)
			checkMonitoring(t, objs, want.monitoring)
			checkWiring(t, objs)
			checkWebhook(t, objs, objs, opts)
		})
	}
}

// The base's manager has the same webhook wiring, its Secret being the one
// the GitHub external-secrets component makes.
func TestBaseWebhook(t *testing.T) {
	base := built(t, gitops.BaseDir)
	_, c := managerContainer(t, base)
	checkWebhook(t, base, built(t, gitops.BaseDir, externalSecretsDir), parseRunFlags(t, c.Args))
}

const externalSecretsDir = "kustomize/components/external-secrets/github"

// checkWebhook: the receiver listens on the container's webhook port; the
// Secret it reads is one an ExternalSecret of secrets makes, syncing the key
// it reads (checkExternalSecrets checks the credentials label); the webhook
// Service selects the manager's Pods and targets that port; an Ingress, when
// there is one, sends the receiver's path to that Service's port.
func checkWebhook(t *testing.T, objs, secrets []*unstructured.Unstructured, opts manager.Options) {
	t.Helper()
	dep, c := managerContainer(t, objs)
	var port int32
	for _, p := range c.Ports {
		if p.Name == "webhook" {
			port = p.ContainerPort
		}
	}
	if _, p, err := net.SplitHostPort(opts.Runners.WebhookAddr); err != nil || p != strconv.Itoa(int(port)) {
		t.Errorf("--webhook-bind-address=%q, want the container's webhook port %d", opts.Runners.WebhookAddr, port)
	}

	es := gitops.Find(secrets, "ExternalSecret", opts.Runners.WebhookSecret)
	if es == nil {
		t.Errorf("--webhook-secret=%q names no ExternalSecret", opts.Runners.WebhookSecret)
	} else {
		if target, _, _ := unstructured.NestedString(es.Object, "spec", "target", "name"); target != opts.Runners.WebhookSecret {
			t.Errorf("ExternalSecret %s makes Secret %q, not the --webhook-secret %q", es.GetName(), target, opts.Runners.WebhookSecret)
		}
		data, _, _ := unstructured.NestedSlice(es.Object, "spec", "data")
		found := false
		for _, d := range data {
			if m, ok := d.(map[string]any); ok && m["secretKey"] == opts.Runners.WebhookSecretKey {
				found = true
			}
		}
		if !found {
			t.Errorf("ExternalSecret %s does not sync the key %q the receiver reads (--webhook-secret-key)", es.GetName(), opts.Runners.WebhookSecretKey)
		}
	}

	u := gitops.Find(objs, "Service", "hyperfleet-webhook")
	if u == nil {
		t.Fatal("no Service hyperfleet-webhook")
	}
	svc := decode[corev1.Service](t, u)
	podLabels := dep.Spec.Template.Labels
	for k, v := range svc.Spec.Selector {
		if podLabels[k] != v {
			t.Errorf("Service hyperfleet-webhook selects %s=%s; the manager's Pods have %q", k, v, podLabels[k])
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "webhook" {
		t.Fatalf("Service hyperfleet-webhook ports %+v, want one targeting port webhook", svc.Spec.Ports)
	}

	ing := gitops.Find(objs, "Ingress", "hyperfleet-webhook")
	if ing == nil {
		return
	}
	in := decode[networkingv1.Ingress](t, ing)
	routed := false
	for _, rule := range in.Spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			b := p.Backend.Service
			if b == nil || b.Name != svc.Name {
				t.Errorf("Ingress hyperfleet-webhook sends %s to %+v, not Service %s", p.Path, p.Backend, svc.Name)
				continue
			}
			if b.Port.Name != svc.Spec.Ports[0].Name && b.Port.Number != svc.Spec.Ports[0].Port {
				t.Errorf("Ingress hyperfleet-webhook sends %s to port %+v; the Service's port is %s (%d)", p.Path, b.Port, svc.Spec.Ports[0].Name, svc.Spec.Ports[0].Port)
			}
			exact := p.PathType != nil && *p.PathType == networkingv1.PathTypeExact
			if p.Path == webhook.Path || (!exact && (p.Path == "/" || strings.HasPrefix(webhook.Path, strings.TrimSuffix(p.Path, "/")+"/"))) {
				routed = true
			}
		}
	}
	if !routed {
		t.Errorf("Ingress hyperfleet-webhook routes no path to the receiver's %s", webhook.Path)
	}
}

func checkExternalSecrets(t *testing.T, objs []*unstructured.Unstructured, store string, opts manager.Options) {
	t.Helper()
	seen := map[string]bool{}
	for _, u := range objs {
		if u.GetKind() != "ExternalSecret" {
			continue
		}
		name := u.GetName()
		seen[name] = true
		if u.GetNamespace() != gitops.Namespace {
			t.Errorf("ExternalSecret %s is in %q, want %s", name, u.GetNamespace(), gitops.Namespace)
		}
		str := func(path ...string) string {
			s, _, _ := unstructured.NestedString(u.Object, path...)
			return s
		}
		if str("spec", "refreshInterval") == "" {
			t.Errorf("ExternalSecret %s has no refreshInterval", name)
		}
		if got := str("spec", "secretStoreRef", "kind"); got != "ClusterSecretStore" {
			t.Errorf("ExternalSecret %s store kind = %q", name, got)
		}
		if got := str("spec", "secretStoreRef", "name"); got != store {
			t.Errorf("ExternalSecret %s store = %q, want %q", name, got, store)
		}
		if got := str("spec", "target", "name"); got != name {
			t.Errorf("ExternalSecret %s makes Secret %q", name, got)
		}
		if got := str("spec", "target", "template", "metadata", "labels", meta.CredentialsLabel); got != "true" {
			t.Errorf("ExternalSecret %s: the Secret's %s label = %q, want \"true\": the operator's cache would not see it", name, meta.CredentialsLabel, got)
		}
		data, _, _ := unstructured.NestedSlice(u.Object, "spec", "data")
		var keys []string
		for _, d := range data {
			if m, ok := d.(map[string]any); ok {
				k, _ := m["secretKey"].(string)
				keys = append(keys, k)
			}
		}
		if want, ok := credentials[name]; !ok {
			t.Errorf("unexpected ExternalSecret %s", name)
		} else if !slices.Equal(keys, want) {
			t.Errorf("ExternalSecret %s syncs keys %v, want %v", name, keys, want)
		}
	}
	for name := range credentials {
		if !seen[name] {
			t.Errorf("no ExternalSecret %s", name)
		}
	}
	if s := opts.Cyberdesk.SupabaseSecret; s == "" || !seen[s] {
		t.Errorf("--cyberdesk-supabase-secret=%q names no ExternalSecret of the overlay", s)
	}
}

func checkMonitoring(t *testing.T, objs []*unstructured.Unstructured, want bool) {
	t.Helper()
	sm := gitops.Find(objs, "ServiceMonitor", "hyperfleet")
	if (sm != nil) != want {
		t.Fatalf("ServiceMonitor present = %v, want %v", sm != nil, want)
	}
	if !want {
		return
	}
	if gitops.Find(objs, "PrometheusRule", "hyperfleet") == nil {
		t.Error("no PrometheusRule")
	}
	dashboards := 0
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && u.GetLabels()["grafana_dashboard"] == "1" {
			dashboards++
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	if dashboards != len(files) || dashboards == 0 {
		t.Errorf("%d dashboard ConfigMaps for %d dashboards", dashboards, len(files))
	}
	// The ServiceMonitor selects the metrics Service and its port by name.
	svc := decode[corev1.Service](t, gitops.Find(objs, "Service", "hyperfleet-metrics"))
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s; the metrics Service has %q", k, v, svc.Labels[k])
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("%d ServiceMonitor endpoints", len(endpoints))
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != svc.Spec.Ports[0].Name || ep["scheme"] != "https" {
		t.Errorf("the ServiceMonitor scrapes port %v over %v; the Service's port is %s over https", ep["port"], ep["scheme"], svc.Spec.Ports[0].Name)
	}
	token, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	if s := gitops.Find(objs, "Secret", token); s == nil {
		t.Errorf("the ServiceMonitor's bearer token Secret %q is not in the build", token)
	}
}

// checkWiring: Services and the NetworkPolicy name ports the container has,
// every binding names a role and a ServiceAccount of the build.
func checkWiring(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	_, c := managerContainer(t, objs)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	wantPorts := map[string]int32{"metrics": 8443, "health": 8081, "webhook": 9443}
	for name, port := range wantPorts {
		if ports[name] != port {
			t.Errorf("container port %s = %d, want %d", name, ports[name], port)
		}
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Port.String() != "health" {
		t.Errorf("liveness probe %+v, want GET /healthz on port health", c.LivenessProbe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.String() != "health" {
		t.Errorf("readiness probe %+v, want GET /readyz on port health", c.ReadinessProbe)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("POD_NAME/POD_NAMESPACE from the downward API: %v", env)
	}
	for _, name := range []string{"hyperfleet-metrics", "hyperfleet-webhook"} {
		u := gitops.Find(objs, "Service", name)
		if u == nil {
			t.Errorf("no Service %s", name)
			continue
		}
		for _, p := range decode[corev1.Service](t, u).Spec.Ports {
			if _, ok := ports[p.TargetPort.String()]; !ok {
				t.Errorf("Service %s targets port %s, which the container does not name", name, p.TargetPort.String())
			}
		}
	}
	np := decode[networkingv1.NetworkPolicy](t, gitops.Find(objs, "NetworkPolicy", gitops.ManagerName))
	var allowed []string
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			allowed = append(allowed, p.Port.String())
		}
	}
	slices.Sort(allowed)
	if want := []string{"health", "metrics", "webhook"}; !slices.Equal(allowed, want) {
		t.Errorf("NetworkPolicy admits ports %v, want %v", allowed, want)
	}
	if len(np.Spec.Egress) != 1 || len(np.Spec.Egress[0].To) != 0 || len(np.Spec.Egress[0].Ports) != 0 {
		t.Errorf("NetworkPolicy egress %+v, want everything allowed", np.Spec.Egress)
	}

	roles := map[string]bool{}
	accounts := map[string]bool{}
	for _, u := range objs {
		switch u.GetKind() {
		case "ClusterRole", "Role":
			roles[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = true
		case "ServiceAccount":
			accounts[u.GetNamespace()+"/"+u.GetName()] = true
		}
	}
	for _, u := range objs {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		switch u.GetKind() {
		case "ClusterRoleBinding":
			b := decode[rbacv1.ClusterRoleBinding](t, u)
			ref, subjects = b.RoleRef, b.Subjects
		case "RoleBinding":
			b := decode[rbacv1.RoleBinding](t, u)
			ref, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		ns := ""
		if ref.Kind == "Role" {
			ns = u.GetNamespace()
		}
		if !roles[ref.Kind+"/"+ns+"/"+ref.Name] {
			t.Errorf("%s binds %s %s, which the build lacks", gitops.ID(u), ref.Kind, ref.Name)
		}
		for _, s := range subjects {
			if s.Kind == "ServiceAccount" && !accounts[s.Namespace+"/"+s.Name] {
				t.Errorf("%s binds ServiceAccount %s/%s, which the build lacks", gitops.ID(u), s.Namespace, s.Name)
			}
		}
	}
}

// Argo CD applies the CRDs and the Namespace in an earlier wave, the CRDs
// server-side; each Application points at an overlay that exists.
func TestArgoCDApplications(t *testing.T) {
	base := built(t, gitops.BaseDir)
	for _, u := range base {
		wave := u.GetAnnotations()["argocd.argoproj.io/sync-wave"]
		switch u.GetKind() {
		case "CustomResourceDefinition":
			if wave != "-1" || !strings.Contains(u.GetAnnotations()["argocd.argoproj.io/sync-options"], "ServerSideApply=true") {
				t.Errorf("CRD %s: sync-wave %q, sync-options %q", u.GetName(), wave, u.GetAnnotations()["argocd.argoproj.io/sync-options"])
			}
		case "Namespace":
			if wave != "-1" {
				t.Errorf("Namespace: sync-wave %q, want -1", wave)
			}
		default:
			if wave != "" {
				t.Errorf("%s: sync-wave %q; only CRDs and the Namespace go first", gitops.ID(u), wave)
			}
		}
	}
	apps := built(t, "argocd")
	seen := map[string]bool{}
	for _, app := range apps {
		p, _, _ := unstructured.NestedString(app.Object, "spec", "source", "path")
		env := strings.TrimPrefix(p, "overlays/")
		if _, ok := environments[env]; !ok || app.GetName() != "hyperfleet-"+env {
			t.Errorf("Application %s deploys %q", app.GetName(), p)
		}
		seen[env] = true
		if ns, _, _ := unstructured.NestedString(app.Object, "spec", "destination", "namespace"); ns != gitops.Namespace {
			t.Errorf("Application %s deploys into %q", app.GetName(), ns)
		}
	}
	if len(seen) != len(environments) {
		t.Errorf("Applications for %v, want one per environment", seen)
	}
}

// Flux: the operator's Kustomization applies the overlay and waits for it;
// the resources' Kustomization depends on it and waits for them.
func TestFluxKustomizations(t *testing.T) {
	for env := range environments {
		objs := built(t, "flux/"+env)
		operator := gitops.Find(objs, "Kustomization", "hyperfleet-operator")
		resources := gitops.Find(objs, "Kustomization", "hyperfleet-resources")
		source := gitops.Find(objs, "GitRepository", "hyperfleet")
		if operator == nil || resources == nil || source == nil {
			t.Fatalf("%s: want GitRepository hyperfleet and Kustomizations hyperfleet-operator and hyperfleet-resources", env)
		}
		p, _, _ := unstructured.NestedString(operator.Object, "spec", "path")
		if filepath.Clean(p) != filepath.Join("overlays", env) {
			t.Errorf("%s: the operator's Kustomization applies %q", env, p)
		}
		if _, err := os.Stat(filepath.Join(root, p, "kustomization.yaml")); err != nil {
			t.Errorf("%s: %v", env, err)
		}
		if src, _, _ := unstructured.NestedString(operator.Object, "spec", "sourceRef", "name"); src != source.GetName() {
			t.Errorf("%s: the operator's Kustomization reads %q", env, src)
		}
		for _, k := range []*unstructured.Unstructured{operator, resources} {
			if w, _, _ := unstructured.NestedBool(k.Object, "spec", "wait"); !w {
				t.Errorf("%s: Kustomization %s does not wait for health", env, k.GetName())
			}
		}
		deps, _, _ := unstructured.NestedSlice(resources.Object, "spec", "dependsOn")
		if len(deps) != 1 || deps[0].(map[string]any)["name"] != operator.GetName() {
			t.Errorf("%s: hyperfleet-resources dependsOn %v, want hyperfleet-operator", env, deps)
		}
	}
}
