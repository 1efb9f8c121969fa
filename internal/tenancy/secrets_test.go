package tenancy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/spirefake"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

const trustDomain = "tenancy.example.org"

var spireServer = spirefake.NewServer(trustDomain)

// logs holds every line the operator (and client-go under it) logged.
var logs = &lockedBuffer{}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) write(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(&l.b, prefix, args)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Len is the offset of the next line: what Since reads from.
func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// Since is a copy of what was logged from offset on.
func (l *lockedBuffer) Since(offset int) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes()[min(offset, l.b.Len()):])
}

// The operator as it ships (the manager's wiring), its log captured at every
// verbosity, against this package's control plane.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		logger := funcr.New(logs.write, funcr.Options{Verbosity: 10})
		ctrl.SetLogger(logger)
		klog.SetLogger(logger)
		if err := hypervisorlab.InstallKubeVirt(context.Background()); err != nil {
			return nil, err
		}
		if err := githubSim.Start(); err != nil {
			return nil, err
		}
		mgr, err := manager.New(testenv.Config(), manager.Options{
			MetricsAddr: "0", ProbeAddr: "0", OperatorNamespace: hypervisorlab.OperatorNamespace,
			ObserveInterval: time.Second, FinalizationTimeout: 8 * time.Second,
			Controllers: []string{manager.ControllerHypervisorCluster, manager.ControllerHypervisorMachineTemplate, manager.ControllerMachineClaim, manager.ControllerRunnerPool},
			Runners:     manager.RunnerOptions{WebhookAddr: "0", GitHubTimeout: 5 * time.Second, SyncInterval: time.Second},
			// Attesting templates mint join tokens on a fake SPIRE server:
			// what is searched here is what the operator writes.
			Attestation: manager.AttestationOptions{AdminSocket: "/run/spire/admin.sock", TrustDomain: trustDomain, EndpointAddr: "127.0.0.1:0", EndpointURL: "https://credentials.tenancy.example.org:9444",
				Dial: func(_, _, installation string) (spire.Server, error) { return spireServer.Client(installation), nil }},
		})
		if err != nil {
			return nil, err
		}
		stop := testenv.StartManager(mgr)
		return func() { stop(); githubSim.Close() }, nil
	})
}

// githubSim is the GitHub the pools' refused credentials are sent to.
var githubSim = githubsim.New(githubsim.Options{Repositories: []string{"acme/widgets"}})

// Secret bytes never leave their Secret: each Secret the operator reads on
// a failure path holds a marker of its own, the failures are driven by a
// tenant, and the marker is looked for in every object's status, every
// event, every log line and every metric.
func TestSecretBytesNeverLeaveTheirSecret(t *testing.T) {
	ctx := context.Background()
	l := hypervisorlab.Proxmox(t)
	tenant := testenv.Tenant(t, l.NS)
	markers := map[string]string{}
	// Short enough that a message quoting the first 40 characters of a
	// Secret quotes the whole marker.
	marker := func(what string) string {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		m := fmt.Sprintf("MRK%02d%x", len(markers), b)
		markers[what] = m
		return m
	}
	create := func(obj client.Object) {
		t.Helper()
		obj.SetNamespace(l.NS)
		if err := tenant.Create(ctx, obj); err != nil {
			t.Fatalf("the tenant cannot create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	secret := func(name string, data map[string]string) {
		create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{meta.CredentialsLabel: "true"}}, StringData: data})
	}
	cluster := func(name string, mutate func(*hypervisorv1alpha1.HypervisorClusterSpec)) {
		base := &hypervisorv1alpha1.HypervisorCluster{}
		if err := l.C.Get(ctx, client.ObjectKey{Namespace: l.NS, Name: "pve"}, base); err != nil {
			t.Fatal(err)
		}
		c := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: *base.Spec.DeepCopy()}
		mutate(&c.Spec)
		create(c)
	}

	// A Proxmox token the simulator refuses.
	tokenID, _ := l.Sim.APIToken()
	secret("bad-token", map[string]string{"tokenID": tokenID, "tokenSecret": marker("proxmox token secret")})
	cluster("pve-bad-token", func(s *hypervisorv1alpha1.HypervisorClusterSpec) {
		s.CredentialsRef = &meta.LocalObjectReference{Name: "bad-token"}
	})
	// Proxmox credentials sent to an endpoint that echoes them back.
	hostile := echo(t)
	secret("echoed-token", map[string]string{"tokenID": "root@pam!x", "tokenSecret": marker("echoed proxmox token")})
	cluster("pve-echo", func(s *hypervisorv1alpha1.HypervisorClusterSpec) {
		s.Endpoint = hostile.URL + "/api2/json"
		s.CredentialsRef = &meta.LocalObjectReference{Name: "echoed-token"}
		s.TLS = &hypervisorv1alpha1.TLSConfig{InsecureSkipVerify: true}
	})
	// A username and password on Proxmox, refused.
	secret("bad-password", map[string]string{"username": "root@pam", "password": marker("proxmox password")})
	cluster("pve-bad-password", func(s *hypervisorv1alpha1.HypervisorClusterSpec) {
		s.CredentialsRef = &meta.LocalObjectReference{Name: "bad-password"}
	})
	// Kubeconfigs: not a kubeconfig, one with a refused field, and a valid
	// one sent to a server that echoes the token.
	kv := func(name, secretName string) {
		create(&hypervisorv1alpha1.HypervisorCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt,
				CredentialsRef: &meta.LocalObjectReference{Name: secretName}, HealthCheckInterval: &metav1.Duration{Duration: time.Second}},
		})
	}
	secret("garbage-kubeconfig", map[string]string{"kubeconfig": "clusters: [" + marker("garbage kubeconfig") + " {"})
	kv("kv-garbage", "garbage-kubeconfig")
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hostile.Certificate().Raw}))
	kubeconfig := func(user string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {server: %q, certificate-authority-data: %s}\nusers:\n- name: u\n  user: %s\n", hostile.URL, ca, user)
	}
	secret("refused-kubeconfig", map[string]string{"kubeconfig": kubeconfig(fmt.Sprintf("{token: %s, exec: {apiVersion: client.authentication.k8s.io/v1, command: %s}}", marker("refused kubeconfig token"), marker("exec command")))})
	kv("kv-refused", "refused-kubeconfig")
	secret("echoed-kubeconfig", map[string]string{"kubeconfig": kubeconfig(fmt.Sprintf("{token: %s}", marker("echoed kubeconfig token")))})
	kv("kv-echo", "echoed-kubeconfig")
	// Claims: user data with no key the claim names, and user data that is a
	// credentials Secret.
	secret("userdata", map[string]string{"other": marker("user data under another key"), "user-data": marker("user data without a header")})
	attested := &hypervisorv1alpha1.HypervisorMachineTemplate{}
	if err := l.C.Get(ctx, client.ObjectKey{Namespace: l.NS, Name: "ubuntu"}, attested); err != nil {
		t.Fatal(err)
	}
	create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "attested"},
		Spec: func() hypervisorv1alpha1.HypervisorMachineTemplateSpec {
			s := *attested.Spec.DeepCopy()
			s.Attestation = &hypervisorv1alpha1.AttestationConfig{Method: hypervisorv1alpha1.AttestationJoinToken,
				SPIRE: &hypervisorv1alpha1.SPIREConfig{ServerAddress: "spire.example.org:8081", TrustDomain: trustDomain}}
			return s
		}(),
	})
	for name, ref := range map[string][2]string{"claim-missing-key": {"ubuntu", "missing"}, "claim-unmarked": {"attested", "user-data"}} {
		create(&hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: ref[0]},
				UserDataSecretRef: &meta.SecretKeyReference{Name: "userdata", Key: ref[1]}},
		})
	}
	// RunnerPools: a token GitHub refuses, a token sent to an API that
	// echoes it in its error message (refused, rejected as invalid, or a
	// server error: the last two quote GitHub's message), and a GitHub App
	// key that is not a key.
	pool := func(name, secretName, apiURL string) {
		create(&hypervisorv1alpha1.RunnerPool{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: hypervisorv1alpha1.RunnerPoolSpec{
				TemplateRef: meta.LocalObjectReference{Name: "ubuntu"}, MaxReplicas: 1, Labels: []string{name},
				GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: "acme", Repository: "widgets",
					CredentialsRef: meta.LocalObjectReference{Name: secretName}, APIURL: apiURL},
			},
		})
	}
	secret("gh-refused-token", map[string]string{"token": "ghp_" + marker("refused GitHub token")})
	pool("gh-refused", "gh-refused-token", githubSim.URL()+"/")
	echoPools := map[int]string{http.StatusUnauthorized: "gh-echo-401", http.StatusUnprocessableEntity: "gh-echo-422", http.StatusInternalServerError: "gh-echo-500"}
	for status, name := range echoPools {
		secret(name, map[string]string{"token": "ghp_" + marker(fmt.Sprintf("GitHub token echoed with %d", status))})
		pool(name, name, echoGitHub(t, status).URL+"/")
	}
	secret("gh-bad-app", map[string]string{"appID": "1", "installationID": "2",
		"privateKey": "-----BEGIN RSA PRIVATE KEY-----\n" + marker("GitHub App key") + "\n-----END RSA PRIVATE KEY-----\n"})
	pool("gh-bad-app", "gh-bad-app", githubSim.URL()+"/")

	// A claim that attests: the join token minted for its machine is a
	// credential until the machine uses it, and goes only into the
	// machine's cloud-init Secret.
	create(&hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-attested"},
		Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "attested"}}})

	// An unlabelled Secret a claim names anyway.
	create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}, StringData: map[string]string{"user-data": marker("unlabelled Secret")}})
	create(&hypervisorv1alpha1.MachineClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-unlabelled"},
		Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"},
			UserDataSecretRef: &meta.SecretKeyReference{Name: "unlabelled", Key: "user-data"}},
	})

	// Every failure has been reported before anything is searched.
	for name, reason := range map[string]string{"pve-bad-token": "", "pve-echo": "", "pve-bad-password": "", "kv-garbage": "KubeconfigInvalid", "kv-refused": "KubeconfigInvalid", "kv-echo": ""} {
		c := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.NS}}
		eventually.That(t, 60*time.Second, func() (bool, string) {
			if err := l.C.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
				return false, err.Error()
			}
			ready := hypervisorlab.ReadyCondition(c.Status.Conditions)
			if ready.Status != metav1.ConditionFalse || ready.Reason == "" || (reason != "" && ready.Reason != reason) {
				return false, fmt.Sprintf("HypervisorCluster %s: Ready %s %s, want False %s", name, ready.Status, ready.Reason, reason)
			}
			return true, ""
		})
	}
	for _, name := range []string{"gh-refused", "gh-echo-401", "gh-echo-422", "gh-echo-500", "gh-bad-app"} {
		p := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.NS}}
		eventually.That(t, 60*time.Second, func() (bool, string) {
			if err := l.C.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return false, err.Error()
			}
			ready := hypervisorlab.ReadyCondition(p.Status.Conditions)
			return ready.Status == metav1.ConditionFalse && ready.Reason != "" && ready.Reason != meta.ProgressingReason,
				fmt.Sprintf("RunnerPool %s: Ready %s %s %s", name, ready.Status, ready.Reason, ready.Message)
		})
	}
	eventually.That(t, 60*time.Second, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		if err := l.C.List(ctx, &list, client.InNamespace(l.NS)); err != nil {
			return false, err.Error()
		}
		for _, c := range list.Items {
			if ready := hypervisorlab.ReadyCondition(c.Status.Conditions); ready.Reason == "" {
				return false, fmt.Sprintf("claim %s has no Ready reason yet", c.Name)
			}
		}
		return true, ""
	})
	time.Sleep(3 * time.Second) // a few more reconciles, and their log lines
	tokens := spireServer.MintedTokens()
	if len(tokens) == 0 {
		t.Fatal("no join token was minted for the attesting claim")
	}
	for i, tok := range tokens {
		markers[fmt.Sprintf("join token %d", i)] = tok
	}

	if where := leaks(ctx, t, markers, 0); len(where) > 0 {
		t.Errorf("Secret bytes left their Secret: %s", strings.Join(where, "; "))
	}
	if len(markers) < 15 {
		t.Fatalf("only %d markers planted", len(markers))
	}
}
