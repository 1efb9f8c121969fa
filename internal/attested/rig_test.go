package attested_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/sim/spiretest"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
)

const trustDomain = "attest.example"

var kvSim *kubevirtsim.Simulator

func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		ctrl.SetLogger(logr.Discard())
		ctx, cancel := context.WithCancel(context.Background())
		if err := hypervisorlab.InstallKubeVirt(ctx); err != nil {
			cancel()
			return nil, err
		}
		var err error
		if kvSim, err = kubevirtsim.Start(ctx, testenv.Config(), kubevirtsim.Options{Logger: logr.Discard()}); err != nil {
			cancel()
			return nil, err
		}
		return func() { cancel(); kvSim.Stop() }, nil
	})
}

// clock is the claims' and the endpoint's clock: real time plus what a
// test stepped it by.
var clock = &testenv.SteppedClock{}

// rig is one test's SPIRE server, the operator (its own manager and
// installation) and a lab to make machines in.
type rig struct {
	t   *testing.T
	srv *spiretest.Server
	// tpm is the host's vTPM manufacturer and DevID authority (rigOptions.tpm).
	tpm *spiretest.TPMLab
	// admin is the test's own view of the SPIRE server, for assertions.
	admin        *spire.Client
	installation string
	lab          *hypervisorlab.Lab
}

type rigOptions struct {
	proxmox bool
	// noSPIRE runs the operator without --spire-admin-socket.
	noSPIRE bool
	// runners runs the RunnerPool reconciler too (no webhook receiver).
	runners bool
	// tcpAdmin reaches SPIRE's admin API over TCP with admin credentials
	// from a Secret, instead of its socket.
	tcpAdmin bool
	// tpm: the SPIRE server attests TPMs too (tpm_devid, software TPMs).
	tpm bool
}

func newRig(t *testing.T, o rigOptions) *rig {
	t.Helper()
	r := &rig{t: t, installation: fmt.Sprintf("att%d", time.Now().UnixNano()%1e9)}
	if o.tpm {
		r.srv, r.tpm = spiretest.StartServerWithTPM(t, trustDomain)
	} else {
		r.srv = spiretest.StartServer(t, trustDomain)
	}
	admin, err := spire.DialSocket(r.srv.SocketPath, trustDomain, r.installation)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	r.admin = admin
	port := spiretest.FreePort(t)
	opts := manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: hypervisorlab.OperatorNamespace,
		ObserveInterval: time.Second, FinalizationTimeout: 8 * time.Second, MachineClaimClock: clock,
		OrphanSweepInterval: 500 * time.Millisecond, OrphanGrace: time.Second,
		Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate,
			manager.ControllerMachineClaim},
		SkipControllerNameValidation: true, InstallationID: r.installation,
		Attestation: manager.AttestationOptions{
			EndpointAddr: fmt.Sprintf("127.0.0.1:%d", port), EndpointURL: fmt.Sprintf("https://127.0.0.1:%d", port),
			// The test plays the machine's bootstrap agent, as itself.
			Selectors:   []string{fmt.Sprintf("unix:uid:%d", os.Getuid())},
			StandbyWait: 2 * time.Second,
		},
	}
	if o.runners {
		opts.Controllers = append(opts.Controllers, manager.ControllerRunnerPool)
		opts.Runners = manager.RunnerOptions{WebhookAddr: "0", SyncInterval: time.Second, GitHubTimeout: 5 * time.Second}
	}
	switch {
	case o.noSPIRE:
	case o.tcpAdmin:
		creds := r.srv.AdminCredentials(t, spiretest.AdminID(trustDomain))
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hypervisorlab.OperatorNamespace}}
		if err := testenv.Client().Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "spire-admin-" + r.installation, Namespace: ns.Name},
			Data: map[string][]byte{"tls.crt": creds.CertPEM, "tls.key": creds.KeyPEM, "bundle.crt": creds.BundlePEM}}
		if err := testenv.Client().Create(context.Background(), secret); err != nil {
			t.Fatal(err)
		}
		opts.Attestation.ServerAddress, opts.Attestation.AdminCredentials, opts.Attestation.TrustDomain = r.srv.Address(), secret.Name, trustDomain
	default:
		opts.Attestation.AdminSocket, opts.Attestation.TrustDomain = r.srv.SocketPath, trustDomain
	}
	mgr, err := manager.New(testenv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.StartManager(mgr))
	if o.proxmox {
		r.lab = hypervisorlab.Proxmox(t)
	} else {
		r.lab = hypervisorlab.KubeVirt(t)
	}
	return r
}

// attest makes the lab's template ask for join-token attestation; with
// credentials, its machines are handed them once attested.
func (r *rig) attest(credentials map[string]string) {
	r.t.Helper()
	r.attestWith(hypervisorv1alpha1.AttestationJoinToken, credentials)
}

// attestWith is attest with method.
func (r *rig) attestWith(method hypervisorv1alpha1.AttestationMethod, credentials map[string]string) {
	r.t.Helper()
	if credentials != nil {
		r.lab.Create(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "machine-credentials", Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"credentials.json": mustJSON(credentials)},
		})
	}
	// The template's reconciler writes it too (its finalizer): retry a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: r.lab.NS}}
		if err := r.lab.Get(tmpl); err != nil {
			return err
		}
		tmpl.Spec.Attestation = &hypervisorv1alpha1.AttestationConfig{Method: method,
			SPIRE: &hypervisorv1alpha1.SPIREConfig{ServerAddress: fmt.Sprintf("127.0.0.1:%d", r.srv.Port), TrustDomain: trustDomain}}
		if credentials != nil {
			tmpl.Spec.Workload = &hypervisorv1alpha1.WorkloadConfig{
				CredentialsSecretRef: &meta.SecretKeyReference{Name: "machine-credentials", Key: "credentials.json"}}
		}
		return r.lab.C.Update(context.Background(), tmpl)
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

func mustJSON(m map[string]string) string {
	var b strings.Builder
	b.WriteString("{")
	first := true
	for k, v := range m {
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(&b, "%q:%q", k, v)
	}
	b.WriteString("}")
	return b.String()
}

// claim makes a MachineClaim of the lab's template.
func (r *rig) claim(name string) *hypervisorv1alpha1.MachineClaim {
	r.t.Helper()
	c := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}}}
	r.lab.Create(c)
	return c
}

// get reads a claim fresh.
func (r *rig) get(name string) *hypervisorv1alpha1.MachineClaim {
	r.t.Helper()
	c := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.lab.NS}}
	if err := r.lab.Get(c); err != nil {
		r.t.Fatal(err)
	}
	return c
}

// guestUserData is the claim's user data where its guest finds it: the
// cloud-init Secret a KubeVirt VM's volume names, or the NoCloud ISO a
// Proxmox VM booted with.
func (r *rig) guestUserData(name string) string {
	r.t.Helper()
	var ud string
	eventually.That(r.t, time.Minute, func() (bool, string) {
		c := r.get(name)
		if c.Status.MachineName == "" {
			return false, "no machine yet: " + hypervisorlab.Describe(c.Status.Phase, c.Status.Conditions)
		}
		if r.lab.Sim != nil {
			if c.Status.VMID == nil {
				return false, "no VMID yet"
			}
			seed, ok := r.lab.Sim.SeedAtBoot(int(*c.Status.VMID))
			if !ok {
				return false, "the VM has not booted: " + hypervisorlab.Describe(c.Status.Phase, c.Status.Conditions)
			}
			var err error
			ud, err = runnersim.NoCloudUserData(seed)
			return err == nil, fmt.Sprint(err)
		}
		s := &corev1.Secret{}
		if err := r.lab.C.Get(context.Background(), client.ObjectKey{Namespace: r.lab.NS, Name: kubevirt.CloudInitSecretName(c.Status.MachineName)}, s); err != nil {
			return false, err.Error()
		}
		ud = string(s.Data[kubevirt.UserDataKey])
		return true, ""
	})
	return ud
}

// machine is the inside of one claim's machine: its agent, attested with
// the token from its user data.
type machine struct {
	r      *rig
	config spire.MachineConfig
	agent  *spiretest.Agent
	source *workloadapi.X509Source
}

// boot reads the claim's machine config from its user data and starts the
// machine's spire-agent with it; attested waits until the agent serves the
// bootstrap workload's SVID.
func (r *rig) boot(name string) *machine {
	r.t.Helper()
	mc, ok, err := attestation.MachineConfigFrom(r.guestUserData(name))
	if err != nil || !ok {
		r.t.Fatalf("the user data of %s has no machine config (%v, %v)", name, ok, err)
	}
	if mc.ServerAddress != fmt.Sprintf("127.0.0.1:%d", r.srv.Port) {
		r.t.Fatalf("the machine is told of SPIRE at %s, want the template's", mc.ServerAddress)
	}
	return &machine{r: r, config: mc, agent: r.srv.StartAgent(r.t, mc.JoinToken, []byte(mc.TrustBundle))}
}

// bootTPM is boot for a machine that attests with its TPM: the host
// provisions the machine's vTPM with a DevID for devidCN (the claim's UID,
// which the host reads off the VM it made), and the machine's agent attests
// with it. The user data must hold no token.
func (r *rig) bootTPM(name, devidCN string) *machine {
	r.t.Helper()
	mc, ok, err := attestation.MachineConfigFrom(r.guestUserData(name))
	if err != nil || !ok {
		r.t.Fatalf("the user data of %s has no machine config (%v, %v)", name, ok, err)
	}
	if mc.Method != spire.MethodTPM || mc.JoinToken != "" {
		r.t.Fatalf("the machine config says method %q with a token %v; want tpm and none", mc.Method, mc.JoinToken != "")
	}
	return &machine{r: r, config: mc, agent: r.srv.StartTPMAgent(r.t, r.tpm.NewTPM(r.t, devidCN), []byte(mc.TrustBundle))}
}

func (m *machine) attested() {
	t := m.r.t
	t.Helper()
	m.agent.WaitSVID(t, m.config.SPIFFEID, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src, err := workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr("unix://"+m.agent.SocketPath)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	svid, err := src.GetX509SVID()
	if err != nil || svid.ID.String() != m.config.SPIFFEID {
		t.Fatalf("the agent's SVID is %v (%v), want %s", svid, err, m.config.SPIFFEID)
	}
	m.source = src
}

// fetch POSTs body to the credential endpoint with the machine's SVID,
// checking the endpoint is the operator's, as hyperfleet-bootstrap does.
func (m *machine) fetch(body string) (int, string) {
	t := m.r.t
	t.Helper()
	endpoint, err := spiffeid.FromString(m.config.EndpointID)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tlsconfig.MTLSClientConfig(m.source, m.source, tlsconfig.AuthorizeID(endpoint))}}
	resp, err := hc.Post(m.config.CredentialEndpoint, "application/json", bytes.NewBufferString(body))
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(data))
}

// fetchUntil retries while the endpoint is not there yet or says 503.
func (m *machine) fetchUntil(body string, timeout time.Duration) (int, string) {
	t := m.r.t
	t.Helper()
	var code int
	var text string
	eventually.That(t, timeout, func() (bool, string) {
		code, text = m.fetch(body)
		return code != 0 && code != http.StatusServiceUnavailable, fmt.Sprintf("%d %s", code, text)
	})
	return code, text
}

// credentials fetches the machine's credentials (retrying 503) and checks
// they decode to {"apiKey": want}.
func (m *machine) credentials(want string) {
	t := m.r.t
	t.Helper()
	code, body := m.fetchUntil("", time.Minute)
	if code != http.StatusOK {
		t.Fatalf("fetch: %d %s", code, body)
	}
	var creds map[string]string
	if err := json.Unmarshal([]byte(body), &creds); err != nil || creds["apiKey"] != want {
		t.Fatalf("the credentials answered do not decode to the Secret's (%v)", err)
	}
}

// eventReasons are the reasons of the events in the lab's namespace; none
// may hold one of secrets.
func (r *rig) eventReasons(secrets ...string) map[string]bool {
	r.t.Helper()
	var events corev1.EventList
	if err := r.lab.C.List(context.Background(), &events, client.InNamespace(r.lab.NS)); err != nil {
		r.t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range events.Items {
		seen[e.Reason] = true
		for _, secret := range secrets {
			if secret != "" && strings.Contains(e.Message, secret) {
				r.t.Fatalf("event %s holds a secret", e.Reason)
			}
		}
	}
	return seen
}

// deleteClaim deletes c, waits until it is gone and checks SPIRE holds
// nothing of its machine any more.
func (r *rig) deleteClaim(c *hypervisorv1alpha1.MachineClaim) {
	r.t.Helper()
	if err := r.lab.C.Delete(context.Background(), c); err != nil {
		r.t.Fatal(err)
	}
	eventually.That(r.t, time.Minute, func() (bool, string) {
		err := r.lab.Get(c)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if left := r.leftInSPIRE(c); len(left) > 0 {
		r.t.Fatalf("left in SPIRE after the claim went: %v", left)
	}
}

// attestation waits for the claim's attestation phase.
func (r *rig) waitAttestation(name string, want hypervisorv1alpha1.AttestationPhase) *hypervisorv1alpha1.MachineClaim {
	r.t.Helper()
	var c *hypervisorv1alpha1.MachineClaim
	eventually.That(r.t, time.Minute, func() (bool, string) {
		c = r.get(name)
		st := c.Status.Attestation
		if st == nil {
			return false, "no attestation status: " + hypervisorlab.Describe(c.Status.Phase, c.Status.Conditions)
		}
		return st.Phase == want, fmt.Sprintf("attestation %s, %s", st.Phase, hypervisorlab.Describe(c.Status.Phase, c.Status.Conditions))
	})
	return c
}

// condition returns the claim's condition of type t.
func condition(c *hypervisorv1alpha1.MachineClaim, t string) *metav1.Condition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == t {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// requests is the credential endpoint's count for result.
func requests(t *testing.T, result string) float64 {
	v, _ := hypervisorlab.MetricValue(t, "hyperfleet_attestation_credential_requests_total", map[string]string{"result": result})
	return v
}

// leftInSPIRE lists what the SPIRE server still holds for the claim's machine.
func (r *rig) leftInSPIRE(c *hypervisorv1alpha1.MachineClaim) []string {
	r.t.Helper()
	ctx := context.Background()
	var left []string
	entries, err := r.admin.ListEntries(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range entries {
		if m, _, err := spire.ParseID(e.SPIFFEID); err == nil && m.UID == string(c.UID) {
			left = append(left, "entry "+e.SPIFFEID)
		}
	}
	agents, err := r.admin.ListAgents(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, a := range agents {
		if a.Machine.UID == string(c.UID) {
			left = append(left, "agent of "+a.Machine.String())
		}
	}
	return left
}
