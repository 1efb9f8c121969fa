package gitops_test

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hyperfleet/hyperfleet/internal/gitops"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

const spireDir = "kustomize/components/spire"

// The spire component applies on a real API server (with the base and the
// external-secrets component, as an overlay would use it), its flags parse
// and validate as `hyperfleet run` would, the Secret it names is the one its
// ExternalSecret makes with every key the operator reads, and machines can
// reach the endpoint it configures: the Service, the container port and the
// NetworkPolicy agree.
func TestSPIREComponent(t *testing.T) {
	objs := built(t, gitops.BaseDir, externalSecretsDir, spireDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			createNamespace(t, decode[corev1.Namespace](t, u))
		}
	}
	for _, u := range objs {
		if err := apply(ctx, testenv.Client(), u.DeepCopy(), true); err != nil {
			t.Errorf("%s: %v", gitops.ID(u), err)
		}
	}
	dep, c := managerContainer(t, objs)
	opts := parseRunFlags(t, c.Args)
	if err := opts.Complete(); err != nil {
		t.Fatalf("the component's flags do not validate: %v", err)
	}
	a := opts.Attestation
	if a.ServerAddress == "" || a.TrustDomain == "" || a.AdminCredentials == "" || a.AdminSocket != "" {
		t.Fatalf("attestation options %+v: want the TCP admin API with credentials, no socket", a)
	}

	es := gitops.Find(objs, "ExternalSecret", a.AdminCredentials)
	if es == nil {
		t.Fatalf("--spire-admin-credentials=%s names no ExternalSecret", a.AdminCredentials)
	}
	if target, _, _ := unstructured.NestedString(es.Object, "spec", "target", "name"); target != a.AdminCredentials {
		t.Errorf("ExternalSecret %s makes Secret %q, not %q", es.GetName(), target, a.AdminCredentials)
	}
	data, _, _ := unstructured.NestedSlice(es.Object, "spec", "data")
	synced := map[string]bool{}
	for _, d := range data {
		if m, ok := d.(map[string]any); ok {
			synced[m["secretKey"].(string)] = true
		}
	}
	for _, k := range []string{"tls.crt", "tls.key", "bundle.crt"} {
		if !synced[k] {
			t.Errorf("ExternalSecret %s does not sync %s, which the operator reads", es.GetName(), k)
		}
	}

	var port int32
	for _, p := range c.Ports {
		if p.Name == "credentials" {
			port = p.ContainerPort
		}
	}
	if _, p, err := net.SplitHostPort(a.EndpointAddr); err != nil || p != strconv.Itoa(int(port)) {
		t.Errorf("--credential-endpoint-bind-address=%q, want the container's credentials port %d", a.EndpointAddr, port)
	}
	u := gitops.Find(objs, "Service", "hyperfleet-credentials")
	if u == nil {
		t.Fatal("no Service hyperfleet-credentials")
	}
	svc := decode[corev1.Service](t, u)
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service hyperfleet-credentials selects %s=%s; the manager's Pods have %q", k, v, dep.Spec.Template.Labels[k])
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "credentials" {
		t.Fatalf("Service hyperfleet-credentials ports %+v, want one targeting port credentials", svc.Spec.Ports)
	}
	endpoint, err := url.Parse(a.EndpointURL)
	if err != nil || endpoint.Scheme != "https" || endpoint.Hostname() != svc.Name+"."+svc.Namespace+".svc" || endpoint.Port() != strconv.Itoa(int(svc.Spec.Ports[0].Port)) {
		t.Errorf("--credential-endpoint-url=%q, want https://%s.%s.svc:%d", a.EndpointURL, svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)
	}
	np := decode[networkingv1.NetworkPolicy](t, gitops.Find(objs, "NetworkPolicy", "hyperfleet-manager"))
	admitted := false
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			admitted = admitted || p.Port != nil && p.Port.String() == "credentials"
		}
	}
	if !admitted {
		t.Error("the manager's NetworkPolicy does not admit the credentials port")
	}
}
