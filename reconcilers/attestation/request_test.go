package attestation_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
)

const (
	installation = "inst-1"
	machineA     = "spiffe://example.org/hyperfleet/inst-1/MachineClaim/ci/runner-a/0b5c-uid"
)

// TestDecodeRequest: what a request may and may not say, before anything
// is read for it.
func TestDecodeRequest(t *testing.T) {
	peer := machineA + "/" + spire.BootstrapWorkload
	cases := []struct {
		name, method, path, peer, body string
		code                           int
		result                         string
	}{
		{"the machine's own SVID, no body", http.MethodPost, spire.CredentialsPath, peer, "", 0, ""},
		{"naming its own claim", http.MethodPost, spire.CredentialsPath, peer, `{"claim":"ci/runner-a"}`, 0, ""},
		{"naming another claim", http.MethodPost, spire.CredentialsPath, peer, `{"claim":"ci/runner-b"}`, http.StatusForbidden, attestation.ResultWrongIdentity},
		{"GET", http.MethodGet, spire.CredentialsPath, peer, "", http.StatusMethodNotAllowed, attestation.ResultBadRequest},
		{"another path", http.MethodPost, "/v1/credentials/../admin", peer, "", http.StatusNotFound, attestation.ResultBadRequest},
		{"no SVID", http.MethodPost, spire.CredentialsPath, "", "", http.StatusUnauthorized, attestation.ResultWrongIdentity},
		{"the machine's own ID, not the bootstrap workload's", http.MethodPost, spire.CredentialsPath, machineA, "", http.StatusForbidden, attestation.ResultWrongIdentity},
		{"another workload on the machine", http.MethodPost, spire.CredentialsPath, machineA + "/job", "", http.StatusForbidden, attestation.ResultWrongIdentity},
		{"another installation", http.MethodPost, spire.CredentialsPath, strings.Replace(peer, "inst-1", "inst-2", 1), "", http.StatusForbidden, attestation.ResultWrongIdentity},
		{"another kind", http.MethodPost, spire.CredentialsPath, strings.Replace(peer, "MachineClaim", "Performer", 1), "", http.StatusForbidden, attestation.ResultWrongIdentity},
		{"the endpoint's own ID", http.MethodPost, spire.CredentialsPath, spire.EndpointID("example.org", installation), "", http.StatusForbidden, attestation.ResultWrongIdentity},
		{"unknown field", http.MethodPost, spire.CredentialsPath, peer, `{"claim":"ci/runner-a","admin":true}`, http.StatusBadRequest, attestation.ResultBadRequest},
		{"two values", http.MethodPost, spire.CredentialsPath, peer, `{} {}`, http.StatusBadRequest, attestation.ResultBadRequest},
		{"not JSON", http.MethodPost, spire.CredentialsPath, peer, `claim=ci/runner-b`, http.StatusBadRequest, attestation.ResultBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, code, result := attestation.DecodeRequest(c.method, c.path, c.peer, []byte(c.body), installation)
			if code != c.code || result != c.result {
				t.Fatalf("code %d, result %q; want %d, %q", code, result, c.code, c.result)
			}
			if c.code == 0 && m != machineA {
				t.Fatalf("speaks for %q, want %q", m, machineA)
			}
		})
	}
}

// FuzzDecodeRequest: no request makes decoding panic, and one that passes
// speaks only for the machine its SVID names, as its bootstrap workload of
// this installation — whatever the body says.
func FuzzDecodeRequest(f *testing.F) {
	peer := machineA + "/" + spire.BootstrapWorkload
	f.Add(http.MethodPost, spire.CredentialsPath, peer, []byte(`{"claim":"ci/runner-a"}`))
	f.Add(http.MethodPost, spire.CredentialsPath, peer, []byte(`{"claim":"ci/runner-b"}`))
	f.Add(http.MethodPost, spire.CredentialsPath, machineA+"/job", []byte(nil))
	f.Add(http.MethodPut, "/", "spiffe://x/y", []byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, method, path, peer string, body []byte) {
		m, code, _ := attestation.DecodeRequest(method, path, peer, body, installation)
		if code != 0 {
			if code < 400 || code > 599 {
				t.Fatalf("refused with %d", code)
			}
			return
		}
		if method != http.MethodPost || path != spire.CredentialsPath {
			t.Fatalf("%s %s passed", method, path)
		}
		id, workload, err := spire.ParseID(peer)
		if err != nil || workload != spire.BootstrapWorkload || id.Installation != installation || id.String() != m {
			t.Fatalf("peer %q passed as %q (parsed %v, %q, %v)", peer, m, id, workload, err)
		}
	})
}
