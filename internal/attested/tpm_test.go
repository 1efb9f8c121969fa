package attested_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
)

// TestTPMAttestationKubeVirt: a template with attestation.method tpm. The
// claim registers a node alias for the DevID of its UID (no token, nothing
// secret in the user data); the machine whose vTPM the host provisioned
// with that DevID attests through SPIRE's tpm_devid, gets its credentials
// once; a machine whose DevID names another claim never becomes this one;
// deleting the claim removes the alias and the agent.
func TestTPMAttestationKubeVirt(t *testing.T) {
	testTPMAttestation(t, rigOptions{tpm: true})
}

// TestTPMAttestationProxmox: the same through proxmoxsim and its NoCloud ISO.
func TestTPMAttestationProxmox(t *testing.T) {
	testTPMAttestation(t, rigOptions{tpm: true, proxmox: true})
}

func testTPMAttestation(t *testing.T, o rigOptions) {
	r := newRig(t, o)
	secretValue := "tpm-s3cr3t-" + r.installation
	r.attestWith(hypervisorv1alpha1.AttestationTPM, map[string]string{"apiKey": secretValue})
	created := time.Now()
	c := r.claim("tpm-worker")
	other := r.claim("tpm-other")

	pending := r.waitAttestation("tpm-worker", hypervisorv1alpha1.AttestationPending)
	if st := pending.Status.Attestation; st.Method != hypervisorv1alpha1.AttestationTPM || st.TokenExpiryTime == nil {
		t.Fatalf("attestation status %+v: want method tpm and a deadline", st)
	}
	if cond := condition(pending, machineclaim.ConditionAttested); cond == nil || cond.Reason != machineclaim.ReasonAttestationPending || !strings.Contains(cond.Message, string(c.UID)) {
		t.Fatalf("Attested condition while pending = %+v; want AttestationPending naming the DevID's CN (the UID)", cond)
	}
	if ud := r.guestUserData("tpm-worker"); strings.Contains(ud, secretValue) || strings.Contains(ud, "joinToken") {
		t.Fatal("the user data holds a credential or a token")
	}

	// A machine whose vTPM holds the other claim's DevID attests as that
	// claim's machine, never as this one: it gets no SVID of this claim.
	r.waitAttestation("tpm-other", hypervisorv1alpha1.AttestationPending)
	intruder := r.bootTPM("tpm-other", string(other.UID))
	intruder.agent.WaitSVID(t, intruder.config.SPIFFEID, time.Minute)

	booted := time.Now()
	m := r.bootTPM("tpm-worker", string(c.UID))
	m.attested()
	svid := time.Now()
	m.credentials(secretValue)
	got := time.Now()
	t.Logf("tpm: agent start → SVID: %s; SVID → credentials: %s; claim created → credentials: %s",
		svid.Sub(booted).Round(time.Millisecond), got.Sub(svid).Round(time.Millisecond), got.Sub(created).Round(time.Millisecond))
	if code, _ := m.fetch(""); code != http.StatusConflict {
		t.Fatalf("a second fetch: %d, want 409", code)
	}
	// The other claim's machine, with its own SVID, cannot take this one's.
	intruder.attested()
	if code, _ := intruder.fetch(""); code != http.StatusOK {
		t.Fatalf("the other machine's own fetch: %d, want 200 (its own credentials)", code)
	}
	r.waitAttestation("tpm-worker", hypervisorv1alpha1.AttestationCredentialsReleased)

	seen := r.eventReasons(secretValue)
	if !seen["TPMAliasRegistered"] || seen["JoinTokenIssued"] {
		t.Fatalf("events %v: want TPMAliasRegistered and no JoinTokenIssued", seen)
	}

	if left := r.leftInSPIRE(c); len(left) < 2 {
		t.Fatalf("SPIRE holds %v for the claim before it is deleted; want its alias, entry and agent", left)
	}
	r.deleteClaim(c)
	if left := r.leftInSPIRE(other); len(left) == 0 {
		t.Fatal("the other claim's alias, entry and agent went with this claim")
	}
}

// TestTPMMachineThatNeverAttestsFails: a claim whose machine never attests
// with its TPM (no DevID was provisioned for it) is failed at its deadline,
// Stalled with AttestationFailed, and says what to check.
func TestTPMMachineThatNeverAttestsFails(t *testing.T) {
	r := newRig(t, rigOptions{tpm: true})
	r.attestWith(hypervisorv1alpha1.AttestationTPM, nil)
	r.claim("tpm-late")
	r.waitAttestation("tpm-late", hypervisorv1alpha1.AttestationPending)
	clock.Step(t, 11*time.Minute) // past the default 10m window (tokenTTL)
	eventually.That(t, time.Minute, func() (bool, string) {
		c := r.get("tpm-late")
		return c.Status.Phase == hypervisorv1alpha1.MachineFailed && c.Status.TerminationReason == machineclaim.ReasonAttestationFailed,
			fmt.Sprintf("%s (%s) %s", c.Status.Phase, c.Status.TerminationReason, hypervisorlab.Describe(c.Status.Phase, c.Status.Conditions))
	})
	c := r.get("tpm-late")
	if cond := condition(c, "Stalled"); cond == nil || cond.Status != "True" {
		t.Fatalf("a claim Failed for attestation is not Stalled: %+v", c.Status.Conditions)
	}
	if cond := condition(c, machineclaim.ConditionAttested); cond == nil || cond.Reason != machineclaim.ReasonAttestationFailed || !strings.Contains(cond.Message, "DevID") {
		t.Fatalf("Attested condition = %+v; want AttestationFailed saying to check the DevID", cond)
	}
	if left := r.leftInSPIRE(c); len(left) > 0 {
		t.Fatalf("left in SPIRE after the machine was retired: %v", left)
	}
}
