package lifecycleprops_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/spirefake"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// The two clusters of every sequence and the template on each.
const (
	clusterPVE  = "pve"
	clusterKV   = "kv"
	templatePVE = "pve-ubuntu"
	templateKV  = "kv-ubuntu"
	// templateAttested's machines attest to SPIRE with a join token.
	templateAttested = "pve-attested"
)

// trustDomain is the fake SPIRE server's; tokenTTL the attested template's
// join-token lifetime (the schema's least).
const (
	trustDomain = "props.example.org"
	tokenTTL    = time.Minute
)

// installation is the installation id of every operator instance: the one
// the sweeper sweeps for, so an instance's successor owns what it made.
const installation = "hf-props"

// The operator's timing in the sequences: short enough that a sequence
// settles in seconds, in the same order as production's (a claim gives up
// before its cluster, the sweeper's grace covers a create in flight).
//
// The cluster's deadline is also longer than any sequence with its settle,
// as production's 30 minutes are longer than a claim's retries (a Proxmox
// 5xx asks for 10 s): a cluster released at its deadline strands, by
// design and with a Warning event, the machine of a claim nobody deleted,
// so a deadline a sequence can reach would make the property's verdict on
// that claim a matter of timing.
const (
	finalizationTimeout    = 15 * time.Second
	clusterDeletionTimeout = 5 * time.Minute
	orphanGrace            = 2 * time.Second
	leaseDuration          = 2 * time.Second
)

// system is one sequence's world: a namespace with a Proxmox cluster and a
// KubeVirt cluster, their templates, and the operator instance that leads.
type system struct {
	t   *testing.T
	ns  string
	c   client.Client
	pve *proxmoxsim.Server
	// spire is the sequence's SPIRE server; clock tells the claims' and the
	// credential endpoint's deadlines, stepped by the "time passes" step.
	spire *spirefake.Server
	clock *testenv.SteppedClock
	op    *instance
	// started counts instances, so each has an identity of its own: a
	// successor must win the Lease like any candidate.
	started int
}

func newSystem(t *testing.T) *system {
	t.Helper()
	s := &system{t: t, ns: testenv.Namespace(t), c: testenv.Client(), spire: spirefake.NewServer(trustDomain), clock: &testenv.SteppedClock{}}
	t.Logf("sequence in namespace %s:", s.ns)
	lat := proxmoxsim.DefaultLatencies()
	lat.Clone = 300 * time.Millisecond // long enough for a kill or a delete to land mid-clone
	s.pve = proxmoxsim.New(proxmoxsim.Options{Latencies: lat, ErrorLog: log.New(io.Discard, "", 0)})
	if err := s.pve.Start(); err != nil {
		t.Fatal(err)
	}
	s.pve.AddTemplate("pve1", hypervisorlab.TemplateVMID, "ubuntu-24.04", map[string]string{
		"scsi0": "local-lvm:base-9000-disk-0,size=10G", "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"ide2": "local-lvm:vm-9000-cloudinit,media=cdrom", "cores": "1", "memory": "1024", "boot": "order=scsi0;ide2;net0",
	})
	tokenID, secret := s.pve.APIToken()
	creds := map[string]string{meta.CredentialsLabel: "true"}
	vmid := int32(hypervisorlab.TemplateVMID)
	every := &metav1.Duration{Duration: time.Second}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-token", Labels: creds},
			StringData: map[string]string{"tokenID": tokenID, "tokenSecret": secret}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pve-ca", Labels: creds},
			Data: map[string][]byte{"ca.crt": s.pve.CACertPEM()}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: clusterPVE}, Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderProxmox, Endpoint: s.pve.URL(),
			CredentialsRef:      &meta.LocalObjectReference{Name: "pve-token"},
			TLS:                 &hypervisorv1alpha1.TLSConfig{CABundleRef: &meta.KeyReference{Kind: meta.SecretKind, Name: "pve-ca", Key: "ca.crt"}},
			HealthCheckInterval: every,
			Proxmox:             &hypervisorv1alpha1.ProxmoxClusterSpec{DefaultBridge: "vmbr0", MaxConcurrentClonesPerNode: 8, MaxConcurrentClonesPerStorage: 8},
		}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: templatePVE}, Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: clusterPVE},
			CloudInit:  &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{hypervisorlab.SSHKey}},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
		}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: templateAttested}, Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: clusterPVE},
			CloudInit:  &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{hypervisorlab.SSHKey}},
			Proxmox:    &hypervisorv1alpha1.ProxmoxTemplateSpec{Source: hypervisorv1alpha1.ProxmoxSource{VMID: &vmid}},
			Attestation: &hypervisorv1alpha1.AttestationConfig{Method: hypervisorv1alpha1.AttestationJoinToken,
				SPIRE: &hypervisorv1alpha1.SPIREConfig{ServerAddress: "spire.props.example.org:8081", TrustDomain: trustDomain,
					TokenTTL: &metav1.Duration{Duration: tokenTTL}}},
		}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: clusterKV}, Spec: hypervisorv1alpha1.HypervisorClusterSpec{
			Provider: hypervisorv1alpha1.ProviderKubeVirt, HealthCheckInterval: every,
		}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: templateKV}, Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: clusterKV},
			CloudInit:  &hypervisorv1alpha1.CloudInitConfig{User: "ubuntu", SSHAuthorizedKeys: []string{hypervisorlab.SSHKey}},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(hypervisorlab.KubeVirtVM)}},
		}},
	} {
		o.SetNamespace(s.ns)
		if err := s.c.Create(context.Background(), o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	s.op = s.start()
	return s
}

// destroy ends the sequence: the operator goes away and the simulator with
// it. What the sequence left in its namespace stays there, unwatched: the
// next sequence's operator watches only its own namespace.
func (s *system) destroy() {
	if s.op != nil {
		s.op.Stop()
	}
	s.pve.Close()
}

// instance is one operator process (testenv.Process, which a command may
// kill) and the identity it holds the Lease under.
type instance struct {
	*testenv.Process
	identity string
}

// start runs a new operator instance, wired as the product wires it
// (internal/manager), with leader election on and only the sequence's
// namespace watched.
func (s *system) start() *instance {
	s.t.Helper()
	s.started++
	in := &instance{identity: fmt.Sprintf("op-%d", s.started)}
	p, err := testenv.StartProcess(func(cfg *rest.Config) (testenv.Runnable, error) {
		return manager.New(cfg, manager.Options{
			MetricsAddr: "0", ProbeAddr: "0",
			OperatorNamespace: s.ns, Namespaces: []string{s.ns}, InstallationID: installation,
			LeaderElect: true, LeaderElectionID: "hyperfleet-leader", LeaderElectionNamespace: s.ns, Identity: in.identity,
			LeaseDuration: leaseDuration, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
			MachineClaimClock: s.clock,
			// Attesting templates register their machines on the sequence's
			// fake SPIRE server.
			Attestation: manager.AttestationOptions{AdminSocket: "/run/spire/admin.sock", TrustDomain: trustDomain,
				EndpointAddr: "127.0.0.1:0", EndpointURL: "https://credentials.props.example.org:9444",
				Dial: func(_, _, installation string) (spire.Server, error) { return s.spire.Client(installation), nil }},
			ObserveInterval: time.Second, FinalizationTimeout: finalizationTimeout, ClusterDeletionTimeout: clusterDeletionTimeout,
			OrphanSweepInterval: 500 * time.Millisecond, OrphanGrace: orphanGrace,
			ReconcileTimeout: 30 * time.Second,
			Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
				manager.ControllerMachineClaim, manager.ControllerOrphans},
			SkipControllerNameValidation: true,
		})
	})
	if err != nil {
		s.t.Fatalf("building operator %s: %v", in.identity, err)
	}
	in.Process = p
	return in
}
