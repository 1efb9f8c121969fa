package attested_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
)

// TestCredentialsAfterAttestationKubeVirt is the happy path on KubeVirt:
// the machine's user data carries a join token and no credential; its
// agent attests with the token, gets the SVID minted for exactly this
// claim, and fetches the credentials over mTLS, once. Deleting the claim
// removes its entries, agent and token from SPIRE.
func TestCredentialsAfterAttestationKubeVirt(t *testing.T) {
	testCredentialsAfterAttestation(t, rigOptions{})
}

// TestCredentialsAfterAttestationProxmox: the same through proxmoxsim and
// the NoCloud ISO the VM boots with.
func TestCredentialsAfterAttestationProxmox(t *testing.T) {
	testCredentialsAfterAttestation(t, rigOptions{proxmox: true})
}

// TestCredentialsAfterAttestationOverTCPAdmin: the same, with the operator
// reaching SPIRE's admin API over TCP with an admin SVID from a Secret (no
// socket mounted): token, entry, its own endpoint SVID and the cleanup.
func TestCredentialsAfterAttestationOverTCPAdmin(t *testing.T) {
	testCredentialsAfterAttestation(t, rigOptions{tcpAdmin: true})
}

func testCredentialsAfterAttestation(t *testing.T, o rigOptions) {
	r := newRig(t, o)
	secretValue := "s3cr3t-" + r.installation
	r.attest(map[string]string{"apiKey": secretValue})
	released, replayed := requests(t, attestation.ResultReleased), requests(t, attestation.ResultReplayed)
	created := time.Now()
	c := r.claim("worker")

	ud := r.guestUserData("worker")
	if strings.Contains(ud, secretValue) {
		t.Fatal("the credential is in the machine's user data")
	}
	pending := r.waitAttestation("worker", hypervisorv1alpha1.AttestationPending)
	if cond := condition(pending, machineclaim.ConditionAttested); cond == nil || cond.Reason != machineclaim.ReasonAttestationPending {
		t.Fatalf("Attested condition while pending = %+v", cond)
	}
	issued := time.Now()
	m := r.boot("worker")
	if m.config.SPIFFEID != pending.Status.Attestation.SPIFFEID || !strings.Contains(m.config.SPIFFEID, string(c.UID)) {
		t.Fatalf("the machine is told to expect %s; the claim recorded %s (uid %s)", m.config.SPIFFEID, pending.Status.Attestation.SPIFFEID, c.UID)
	}
	m.attested()
	svid := time.Now()
	m.credentials(secretValue)
	got := time.Now()
	t.Logf("claim created → user data with its token: %s; agent start → SVID: %s; SVID → credentials: %s; claim created → credentials: %s",
		issued.Sub(created).Round(time.Millisecond), svid.Sub(issued).Round(time.Millisecond), got.Sub(svid).Round(time.Millisecond), got.Sub(created).Round(time.Millisecond))

	after := r.waitAttestation("worker", hypervisorv1alpha1.AttestationCredentialsReleased)
	st := after.Status.Attestation
	if st.AttestedTime == nil || st.CredentialsReleasedTime == nil {
		t.Fatalf("attestation status %+v lacks the times", st)
	}
	eventually.That(t, 30*time.Second, func() (bool, string) {
		cond := condition(r.get("worker"), machineclaim.ConditionAttested)
		return cond != nil && cond.Status == "True" && cond.Reason == "CredentialsReleased", fmt.Sprintf("%+v", cond)
	})
	statusJSON, _ := json.Marshal(after.Status)
	if strings.Contains(string(statusJSON), secretValue) || strings.Contains(string(statusJSON), m.config.JoinToken) {
		t.Fatal("the status holds a secret")
	}

	if code, body := m.fetch(""); code != http.StatusConflict {
		t.Fatalf("a second fetch: %d %s, want 409", code, body)
	}
	if d := requests(t, attestation.ResultReleased) - released; d != 1 {
		t.Fatalf("released counted %v times, want 1", d)
	}
	if d := requests(t, attestation.ResultReplayed) - replayed; d != 1 {
		t.Fatalf("replayed counted %v times, want 1", d)
	}
	seen := r.eventReasons(secretValue, m.config.JoinToken)
	for _, want := range []string{"JoinTokenIssued", "CredentialsReleased"} {
		if !seen[want] {
			t.Fatalf("no %s event; saw %v", want, seen)
		}
	}
	for _, want := range []string{"JoinTokenIssued", "CredentialsReleased"} {
		if !seen[want] {
			t.Fatalf("no %s event; saw %v", want, seen)
		}
	}

	if left := r.leftInSPIRE(c); len(left) == 0 {
		t.Fatal("SPIRE holds nothing for the claim before it is deleted; the cleanup check below would pass vacuously")
	}
	r.deleteClaim(c)
	tokenSecret := &corev1.Secret{}
	if err := r.lab.C.Get(context.Background(), client.ObjectKey{Namespace: r.lab.NS, Name: "worker-attestation"}, tokenSecret); !apierrors.IsNotFound(err) {
		t.Fatalf("the join-token Secret is left: %v", err)
	}
}

// TestAttestationWithoutWorkload: attestation does not depend on the
// workload — a machine with workload none attests, checks in (204) and
// gets an identity and nothing else; its user data runs the agent.
func TestAttestationWithoutWorkload(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.attest(nil)
	// The bundle the machine verifies SPIRE with comes from the template's
	// trustBundleRef when it names one (a ConfigMap here).
	bundle, err := r.admin.TrustBundle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	marked := string(bundle) + "# from the ConfigMap\n"
	r.lab.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "spire-bundle"}, Data: map[string]string{"bundle.crt": marked}})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: r.lab.NS}}
		if err := r.lab.Get(tmpl); err != nil {
			return err
		}
		tmpl.Spec.Attestation.SPIRE.TrustBundleRef = &meta.KeyReference{Kind: meta.ConfigMapKind, Name: "spire-bundle", Key: "bundle.crt"}
		return r.lab.C.Update(context.Background(), tmpl)
	}); err != nil {
		t.Fatal(err)
	}
	r.claim("plain")
	ud := r.guestUserData("plain")
	if !strings.Contains(ud, `runcmd:`) || !strings.Contains(ud, `"attest"]`) {
		t.Fatalf("a machine without a workload must run the agent's attest from its user data:\n%s", ud)
	}
	m := r.boot("plain")
	if m.config.TrustBundle != marked {
		t.Fatal("the machine was not given the bundle of the template's trustBundleRef")
	}
	m.attested()
	if code, body := m.fetchUntil("", time.Minute); code != http.StatusNoContent || body != "" {
		t.Fatalf("check-in: %d %q, want 204 and nothing", code, body)
	}
	r.waitAttestation("plain", hypervisorv1alpha1.AttestationAttested)
	eventually.That(t, 30*time.Second, func() (bool, string) {
		cond := condition(r.get("plain"), machineclaim.ConditionAttested)
		return cond != nil && cond.Status == "True" && cond.Reason == "Attested", fmt.Sprintf("%+v", cond)
	})
}

// TestStolenTokenAndAnotherClaimsCredentials: once a machine attested,
// its token is worth nothing to a second "machine" (a second agent), and
// machine A's SVID cannot get claim B's credentials.
func TestStolenTokenAndAnotherClaimsCredentials(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.attest(map[string]string{"apiKey": "for-every-machine"})
	wrong := requests(t, attestation.ResultWrongIdentity)
	r.claim("a")
	r.claim("b")
	a := r.boot("a")
	a.attested()

	thief := r.srv.StartAgent(t, a.config.JoinToken, []byte(a.config.TrustBundle))
	if log, refused := thief.WaitLog("join token does not exist or has already been used", time.Minute); !refused {
		t.Fatalf("SPIRE did not refuse the stolen token; the second agent's log:\n%s", log)
	}
	r.waitAttestation("b", hypervisorv1alpha1.AttestationPending)
	if code, body := a.fetchUntil(`{"claim":"`+r.lab.NS+`/b"}`, time.Minute); code != http.StatusForbidden {
		t.Fatalf("A's SVID asking for B's credentials: %d %s, want 403", code, body)
	}
	if d := requests(t, attestation.ResultWrongIdentity) - wrong; d != 1 {
		t.Fatalf("wrong_identity counted %v times, want 1", d)
	}
	if after := r.get("b"); after.Status.Attestation.Phase != hypervisorv1alpha1.AttestationPending || after.Status.Attestation.CredentialsReleasedTime != nil {
		t.Fatalf("B's attestation moved: %+v", after.Status.Attestation)
	}
	// A itself still gets its own, once.
	if code, body := a.fetch(""); code != http.StatusOK {
		t.Fatalf("A's own fetch: %d %s", code, body)
	}
}

// TestLateMachineIsRefusedAndFailed: a machine that has not attested by its
// token's expiry is retired (Failed, AttestationFailed, Stalled), and a
// fetch after the deadline is refused.
func TestLateMachineIsRefusedAndFailed(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.attest(map[string]string{"apiKey": "late"})
	expired := requests(t, attestation.ResultExpired)
	r.claim("late")
	m := r.boot("late") // read before the step: the machine had booted
	r.waitAttestation("late", hypervisorv1alpha1.AttestationPending)
	m.attested()
	clock.Step(t, 11*time.Minute) // past the default 10m token TTL
	if code, body := m.fetchUntil("", time.Minute); code != http.StatusGone {
		t.Fatalf("a fetch past the deadline: %d %s, want 410", code, body)
	}
	if d := requests(t, attestation.ResultExpired) - expired; d < 1 {
		t.Fatal("expired was not counted")
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		c := r.get("late")
		return c.Status.Phase == hypervisorv1alpha1.MachineFailed && c.Status.TerminationReason == machineclaim.ReasonAttestationFailed,
			fmt.Sprintf("%s (%s) %s", c.Status.Phase, c.Status.TerminationReason, hypervisorlab.Describe(c.Status.Phase, c.Status.Conditions))
	})
	c := r.get("late")
	if cond := condition(c, "Stalled"); cond == nil || cond.Status != "True" {
		t.Fatalf("a claim Failed for attestation is not Stalled: %+v", c.Status.Conditions)
	}
	if cond := condition(c, machineclaim.ConditionAttested); cond == nil || cond.Reason != machineclaim.ReasonAttestationFailed {
		t.Fatalf("Attested condition = %+v", cond)
	}
	if left := r.leftInSPIRE(c); len(left) > 0 {
		t.Fatalf("left in SPIRE after the machine was retired: %v", left)
	}
}

// TestSPIREDownDuringCreate: with SPIRE down, a claim waits with a
// condition saying so and makes no machine; when SPIRE is back it goes on,
// and its machine attests.
func TestSPIREDownDuringCreate(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.attest(map[string]string{"apiKey": "k"})
	r.srv.Stop(t)
	r.claim("patient")
	eventually.That(t, time.Minute, func() (bool, string) {
		c := r.get("patient")
		ready := hypervisorlab.ReadyCondition(c.Status.Conditions)
		return ready.Reason == machineclaim.ReasonSPIREUnavailable, hypervisorlab.Describe(c.Status.Phase, c.Status.Conditions)
	})
	if c := r.get("patient"); c.Status.StartTime != nil {
		t.Fatal("a machine was started while SPIRE was down")
	}
	r.srv.Start(t)
	m := r.boot("patient")
	m.attested()
	if code, body := m.fetchUntil("", 2*time.Minute); code != http.StatusOK {
		t.Fatalf("fetch after SPIRE came back: %d %s", code, body)
	}
}

// TestNoSPIREConfigured: a template asking for attestation on an operator
// without SPIRE stalls its claims, saying what to configure.
func TestNoSPIREConfigured(t *testing.T) {
	r := newRig(t, rigOptions{noSPIRE: true})
	r.attest(nil)
	r.claim("nowhere")
	eventually.That(t, time.Minute, func() (bool, string) {
		c := r.get("nowhere")
		ready := hypervisorlab.ReadyCondition(c.Status.Conditions)
		stalled := condition(c, "Stalled")
		return ready.Reason == machineclaim.ReasonSPIRENotConfigured && stalled != nil && stalled.Status == "True" &&
			strings.Contains(ready.Message, "--spire-admin-socket"), hypervisorlab.Describe(c.Status.Phase, c.Status.Conditions)
	})
	if c := r.get("nowhere"); c.Status.MachineName != "" && c.Status.StartTime != nil {
		t.Fatal("a machine was made without attestation")
	}
}

// TestSweeperForgetsMachinesWithoutClaim: what SPIRE holds for a machine
// whose claim is gone (its cleanup never ran: SPIRE was down, the operator
// crashed) is removed by the sweeper; a live claim's is kept.
func TestSweeperForgetsMachinesWithoutClaim(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.attest(nil)
	live := r.claim("live")
	r.waitAttestation("live", hypervisorv1alpha1.AttestationPending)
	ghost := &hypervisorv1alpha1.MachineClaim{}
	ghost.Namespace, ghost.Name, ghost.UID = r.lab.NS, "ghost", "0000-gone"
	m := spire.MachineID{TrustDomain: trustDomain, Installation: r.installation, Kind: attestation.MachineKind, Namespace: r.lab.NS, Name: "ghost", UID: "0000-gone"}
	w, _ := m.Workload(spire.BootstrapWorkload)
	ctx := context.Background()
	if _, err := r.admin.CreateEntry(ctx, spire.EntrySpec{SPIFFEID: w, Parent: m, Selectors: []spire.Selector{{Type: "unix", Value: "uid:0"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.admin.CreateJoinToken(ctx, m, time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(r.leftInSPIRE(ghost)) == 0 {
		t.Fatal("the ghost machine's entries were not made")
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		left := r.leftInSPIRE(ghost)
		return len(left) == 0, fmt.Sprint(left)
	})
	if len(r.leftInSPIRE(live)) == 0 {
		t.Fatal("the sweeper removed a live claim's entries")
	}
}
