package attested_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// TestHotStandbyMachineGetsCredentialsOnlyOnceTaken: a template that
// attests keeps a hot standby machine. It attests as its standby claim and
// is told to wait (202), holding no credential, for as long as no claim
// takes it; the claim that takes it then gets its own credentials through
// that very machine's SVID, once. The machine's SPIRE identity lives as
// long as the claim that holds it, not its standby claim.
func TestHotStandbyMachineGetsCredentialsOnlyOnceTaken(t *testing.T) {
	r := newRig(t, rigOptions{})
	secretValue := "hot-" + r.installation
	r.attest(map[string]string{"apiKey": secretValue})
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: r.lab.NS}}
		if err := r.lab.Get(tmpl); err != nil {
			return err
		}
		tmpl.Spec.Standby = &hypervisorv1alpha1.StandbySpec{Hot: 1}
		return r.lab.C.Update(context.Background(), tmpl)
	}); err != nil {
		t.Fatal(err)
	}
	var sb hypervisorv1alpha1.MachineClaim
	eventually.That(t, time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		if err := r.lab.C.List(context.Background(), &list, client.InNamespace(r.lab.NS), client.HasLabels{standby.TemplateLabel}); err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 {
			return false, fmt.Sprintf("%d standby claims", len(list.Items))
		}
		sb = list.Items[0]
		return true, ""
	})
	if ud := r.guestUserData(sb.Name); strings.Contains(ud, secretValue) {
		t.Fatal("the standby machine's user data holds the credential")
	}
	m := r.boot(sb.Name)
	m.attested()
	standbyAnswers := requests(t, attestation.ResultStandby)
	if code, body := m.fetchUntil("", time.Minute); code != http.StatusAccepted || strings.Contains(body, secretValue) {
		t.Fatalf("a standby machine's request: %d %q; want 202 and no credential", code, body)
	}
	if d := requests(t, attestation.ResultStandby) - standbyAnswers; d < 1 {
		t.Errorf("standby answers counted %v times, want at least 1", d)
	}
	hot := r.waitAttestation(sb.Name, hypervisorv1alpha1.AttestationAttested)
	if hot.Status.Attestation.CredentialsReleasedTime != nil {
		t.Fatal("the standby claim records credentials released")
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: r.lab.NS}}
		if err := r.lab.Get(tmpl); err != nil {
			return false, err.Error()
		}
		return tmpl.Status.Standby != nil && tmpl.Status.Standby.Hot == 1, fmt.Sprintf("%+v", tmpl.Status.Standby)
	})

	// The machine asks on, as hyperfleet-bootstrap does, while a claim
	// arrives and takes it.
	type result struct {
		code int
		body string
	}
	got := make(chan result, 1)
	go func() {
		for {
			code, body := m.fetch("")
			if code != http.StatusAccepted && code != http.StatusServiceUnavailable && code != 0 {
				got <- result{code, body}
				return
			}
		}
	}()
	c := r.claim("worker")
	var res result
	select {
	case res = <-got:
	case <-time.After(time.Minute):
		t.Fatal("the standby machine got nothing within a minute of a claim taking it")
	}
	var creds map[string]string
	if res.code != http.StatusOK || json.Unmarshal([]byte(res.body), &creds) != nil || creds["apiKey"] != secretValue {
		t.Fatalf("once taken, the machine's request: %d; want 200 with the claim's credentials", res.code)
	}
	worker := r.waitAttestation("worker", hypervisorv1alpha1.AttestationCredentialsReleased)
	if worker.Status.MachineName != hot.Status.MachineName || worker.Status.Attestation.SPIFFEID != hot.Status.Attestation.SPIFFEID {
		t.Fatalf("claim worker holds machine %s (%s); want the standby machine %s (%s)", worker.Status.MachineName,
			worker.Status.Attestation.SPIFFEID, hot.Status.MachineName, hot.Status.Attestation.SPIFFEID)
	}
	if code, body := m.fetch(""); code != http.StatusConflict {
		t.Fatalf("a second fetch: %d %s, want 409", code, body)
	}
	// The standby claim is gone; the sweeper (every 500 ms, after 1 s)
	// leaves the machine's identity to the claim that holds it.
	eventually.That(t, time.Minute, func() (bool, string) {
		err := r.lab.Get(&sb)
		return err != nil, "the standby claim is still there"
	})
	time.Sleep(3 * time.Second)
	if left := r.leftInSPIRE(&sb); len(left) == 0 {
		t.Fatal("the machine's SPIRE entries went with its standby claim while claim worker holds the machine")
	}
	seen := r.eventReasons(secretValue, m.config.JoinToken)
	for _, want := range []string{"TookStandby", "CredentialsReleased"} {
		if !seen[want] {
			t.Errorf("no %s event; saw %v", want, seen)
		}
	}
	// Deleting the claim removes the machine and what SPIRE holds of it.
	r.deleteClaim(c)
	if left := r.leftInSPIRE(&sb); len(left) > 0 {
		t.Fatalf("left in SPIRE after the claim holding the machine went: %v", left)
	}
}
