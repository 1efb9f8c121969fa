package hypervisorcluster_test

import (
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
)

// hungProxmox is a Proxmox endpoint that accepts every connection, completes
// TLS, reads the request and never answers: a pveproxy that hangs. It
// counts the health checks (GET /version) it holds.
func hungProxmox(t *testing.T) (endpoint string, caPEM []byte, held *atomic.Int64) {
	t.Helper()
	held = &atomic.Int64{}
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/version") {
			held.Add(1)
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(func() { close(release); srv.Close() })
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv.URL + "/api2/json", caPEM, held
}

// No tenant can stall another: namespace A's HypervisorCluster names a
// Proxmox endpoint that accepts connections and never answers, with a
// template and a claim on it. While A's checks hang, namespace B's cluster,
// template and claim (on the Proxmox simulator), made after A's first
// request is held, turn Ready within a bound shorter than one hung request
// may last — and A's cluster ends saying its endpoint timed out.
func TestHungEndpointStallsOnlyItsNamespace(t *testing.T) {
	endpoint, caPEM, held := hungProxmox(t)
	// Namespace A is a tenant as the threat model has it (docs/security.md).
	nsA := testenv.Namespace(t)
	a := &hypervisorlab.Lab{T: t, NS: nsA, C: testenv.Tenant(t, nsA)}
	a.Create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"tokenID": "hyperfleet@pve!a", "tokenSecret": "a-secret"},
	})
	a.Create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		Data:       map[string][]byte{"ca.crt": caPEM},
	})
	vmid := int32(hypervisorlab.TemplateVMID)
	a.Create(&hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pve"},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderProxmox, Endpoint: endpoint,
			CredentialsRef:      &meta.LocalObjectReference{Name: "pve-token"},
			TLS:                 &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "pve-ca", Key: "ca.crt"}},
			HealthCheckInterval: &metav1.Duration{Duration: time.Second},
			Proxmox:             &hypervisorv1alpha1.ProxmoxClusterSpec{DefaultBridge: "vmbr0"},
		},
	})
	a.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "pve"},
			CloudInit:  &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{hypervisorlab.SSHKey}},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		},
	})
	a.Create(&hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "runner"},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
	})
	// A's cluster is now being checked, inside a request the endpoint holds.
	eventually.That(t, 30*time.Second, func() (bool, string) {
		return held.Load() > 0, "the hung endpoint has not been asked for its version yet"
	})

	b := hypervisorlab.Proxmox(t)
	b.Create(&hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "runner"},
		Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}},
	})
	// Shorter than one hung request may last (the providers' response
	// header deadline, 15 s; the request timeout of 30 s before there was
	// one): B is never served only after A's hang.
	const onTime = 12 * time.Second
	for _, obj := range []client.Object{
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}},
		&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "runner"}},
	} {
		eventually.That(t, onTime, func() (bool, string) {
			if err := b.Get(obj); err != nil {
				return false, err.Error()
			}
			o := obj.(meta.ConditionsAccessor)
			return conditions.IsReady(o, obj.GetGeneration()), fmt.Sprintf("%T %s in the other namespace: %s",
				obj, obj.GetName(), hypervisorlab.Describe("", o.GetConditions()))
		})
	}

	cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}
	eventually.That(t, time.Minute, func() (bool, string) {
		if err := a.Get(cluster); err != nil {
			return false, err.Error()
		}
		ready := hypervisorlab.ReadyCondition(cluster.Status.Conditions)
		return ready.Reason == "HypervisorUnreachable" && strings.Contains(ready.Message, "timed out"),
			"the hung cluster: " + hypervisorlab.Describe("", cluster.Status.Conditions)
	})
	if hypervisorlab.ReadyCondition(cluster.Status.Conditions).Status == metav1.ConditionTrue {
		t.Error("the hung cluster is Ready")
	}
}
