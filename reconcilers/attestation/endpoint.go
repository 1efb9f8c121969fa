package attestation

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// MachineKind is the kind segment of a MachineClaim's SPIFFE ID.
const MachineKind = "MachineClaim"

// Results of a credential request, the metric's result label.
const (
	ResultReleased      = "released"
	ResultAttested      = "attested"
	ResultReplayed      = "replayed"
	ResultWrongIdentity = "wrong_identity"
	ResultUnknown       = "unknown_machine"
	ResultExpired       = "expired"
	ResultBadRequest    = "bad_request"
	ResultUnavailable   = "unavailable"
	ResultMisconfigured = "misconfigured"
	ResultStandby       = "standby"
)

var credentialRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "hyperfleet_attestation_credential_requests_total",
	Help: "Requests to the credential endpoint, by result: released, attested (no credentials to hand), replayed (handed out before), wrong_identity (an SVID that is not the claim's), unknown_machine, expired (past the token's expiry, or the machine ending), bad_request, unavailable (try again), misconfigured (the credentials Secret is unusable), standby (a standby machine no claim has taken yet: ask again).",
}, []string{"result"})

// Metrics are the endpoint's collectors, for the manager's registry.
func Metrics() []prometheus.Collector { return []prometheus.Collector{credentialRequests} }

// maxBody bounds what is read of a request: it carries nothing.
const maxBody = 4 << 10

// Endpoint is the credential endpoint: a machine that attested POSTs to
// spire.CredentialsPath over mTLS with its X509-SVID, and receives its
// workload's credentials exactly once, if the SVID's ID is exactly the one
// minted for its claim and the claim's token has not expired. Every replica
// serves it: the hand-out is recorded in the claim's status with an
// optimistic lock, so two replicas (or two requests) never both hand out.
type Endpoint struct {
	// Installation is the only installation whose machines it serves.
	Installation string
	// Reader reads claims and templates past the cache (the manager's API
	// reader): a decision must see the latest status, never a stale one.
	Reader      client.Reader
	Client      client.Client
	Credentials *credentials.Reader
	Recorder    events.EventRecorder
	// Now is the clock deadlines are told by (time.Now when nil).
	Now func() time.Time
	// Cache finds the claim that took a standby machine, by the machine's
	// SPIFFE ID (the index SPIFFEIDIndex), and watches a standby claim
	// for its binding while its machine waits; without it a standby
	// machine is answered at once, and only while its standby claim is
	// there.
	Cache client.Reader
	// StandbyWait is how long a standby machine's request is held for a
	// claim to take it before it is answered 202 and asks again (20 s).
	StandbyWait time.Duration
}

type answer struct {
	code    int
	result  string
	message string
	body    []byte
}

func (e *Endpoint) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// ServeHTTP answers one request; the TLS layer has already verified the
// peer's SVID against the trust bundle.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	a := answer{code: http.StatusRequestEntityTooLarge, result: ResultBadRequest, message: "the request body is too large"}
	if err == nil {
		a = e.answer(r.Context(), r.Method, r.URL.Path, peerID(r.TLS), body)
	}
	credentialRequests.WithLabelValues(a.result).Inc()
	if a.code != http.StatusOK && a.code != http.StatusNoContent && a.code != http.StatusAccepted {
		ctrl.LoggerFrom(r.Context()).V(1).Info("Credential request refused", "result", a.result, "reason", a.message)
	}
	switch {
	case a.body != nil:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(a.code)
		_, _ = w.Write(a.body)
	case a.code == http.StatusNoContent:
		w.WriteHeader(a.code)
	case a.code == http.StatusAccepted:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(a.code)
	default:
		http.Error(w, a.message, a.code)
	}
}

// peerID is the SPIFFE ID of the client's SVID, or "" without one.
func peerID(state *tls.ConnectionState) string {
	if state == nil || len(state.PeerCertificates) == 0 {
		return ""
	}
	id, err := x509svid.IDFromCert(state.PeerCertificates[0])
	if err != nil {
		return ""
	}
	return id.String()
}

// answer decides a request. It reads the claim fresh each time and writes
// only to record a hand-out, so a refused request changes nothing.
func (e *Endpoint) answer(ctx context.Context, method, path, peer string, body []byte) answer {
	m, refused := decodeRequest(method, path, peer, body, e.Installation)
	if refused != nil {
		return *refused
	}
	claim, refused := e.claimOf(ctx, m, peer)
	if refused != nil {
		return *refused
	}
	return e.answerFor(ctx, claim, m, peer)
}

// answerFor decides a request of machine m for claim's credentials.
func (e *Endpoint) answerFor(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim, m spire.MachineID, peer string) answer {
	st := claim.Status.Attestation
	// The UID check comes with the ID's: a claim recreated under the same
	// name is another machine, and an old machine's SVID never speaks for
	// it. A claim of the same namespace that took a standby machine
	// (claimOf) carries that machine's ID in its status, which only the
	// operator writes.
	own := string(claim.UID) == m.UID
	taker := !own && claim.Namespace == m.Namespace && !standby.IsStandby(claim)
	if st == nil || st.SPIFFEID != peer || !own && !taker {
		return answer{code: http.StatusForbidden, result: ResultWrongIdentity, message: "this SVID was not minted for this machine"}
	}
	if standby.IsStandby(claim) {
		return e.standby(ctx, claim, m, peer)
	}
	if !claim.DeletionTimestamp.IsZero() || claim.Status.Phase == hypervisorv1alpha1.MachineStopping ||
		claim.Status.Phase == hypervisorv1alpha1.MachineTerminated || claim.Status.Phase == hypervisorv1alpha1.MachineFailed {
		return answer{code: http.StatusGone, result: ResultExpired, message: "the machine is ending"}
	}
	if st.CredentialsReleasedTime != nil {
		return answer{code: http.StatusConflict, result: ResultReplayed, message: "the credentials were handed out already"}
	}
	now := e.now()
	if st.AttestedTime == nil && (st.TokenExpiryTime == nil || !now.Before(st.TokenExpiryTime.Time)) {
		// The deadline is to attest by; a machine that did in time (a
		// standby machine, taken later) is past it.
		return answer{code: http.StatusGone, result: ResultExpired, message: "past the machine's attestation deadline (its join token's expiry)"}
	}
	ref, err := e.credentialsRef(ctx, claim)
	if err != nil {
		return answer{code: http.StatusServiceUnavailable, result: ResultUnavailable, message: "try again"}
	}
	var creds []byte
	if ref != nil {
		if creds, err = e.read(ctx, claim, ref); err != nil {
			e.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, "CredentialsUnusable", "ReleaseCredentials",
				"The machine attested, but its credentials cannot be handed out: %v", err)
			return answer{code: http.StatusServiceUnavailable, result: ResultMisconfigured, message: "the machine's credentials are not available; the claim's events say why"}
		}
	}
	if ref == nil && st.Phase == hypervisorv1alpha1.AttestationAttested {
		return answer{code: http.StatusNoContent, result: ResultAttested}
	}
	if err := e.record(ctx, claim, now, ref != nil); err != nil {
		// A conflict is a concurrent write (often the reconciler's); the
		// machine asks again and the next read decides.
		return answer{code: http.StatusServiceUnavailable, result: ResultUnavailable, message: "try again"}
	}
	if ref == nil {
		e.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, "Attested", "Attest", "The machine proved its identity %s", peer)
		return answer{code: http.StatusNoContent, result: ResultAttested}
	}
	e.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, "CredentialsReleased", "ReleaseCredentials",
		"The machine proved its identity %s and received its credentials (Secret %s, key %s), once", peer, ref.Name, ref.Key)
	return answer{code: http.StatusOK, result: ResultReleased, body: creds}
}

// decodeRequest checks everything a request says before anything is read:
// the path, the method, the peer's SPIFFE ID (a bootstrap workload of a
// MachineClaim of this installation) and the body. It reads nothing, so
// FuzzDecodeRequest covers it whole.
func decodeRequest(method, path, peer string, body []byte, installation string) (spire.MachineID, *answer) {
	refuse := func(code int, result, msg string) (spire.MachineID, *answer) {
		return spire.MachineID{}, &answer{code: code, result: result, message: msg}
	}
	switch {
	case path != spire.CredentialsPath:
		return refuse(http.StatusNotFound, ResultBadRequest, "not found: POST "+spire.CredentialsPath)
	case method != http.MethodPost:
		return refuse(http.StatusMethodNotAllowed, ResultBadRequest, "use POST")
	case peer == "":
		return refuse(http.StatusUnauthorized, ResultWrongIdentity, "no X509-SVID presented")
	}
	m, workload, err := spire.ParseID(peer)
	if err != nil || workload != spire.BootstrapWorkload || m.Installation != installation || m.Kind != MachineKind {
		return refuse(http.StatusForbidden, ResultWrongIdentity, "this SVID is not a HyperFleet machine's bootstrap identity of this installation")
	}
	req, err := parseRequest(body)
	if err != nil {
		return refuse(http.StatusBadRequest, ResultBadRequest, err.Error())
	}
	if req.Claim != "" && req.Claim != m.Namespace+"/"+m.Name {
		// The SVID alone decides whose credentials these are; a machine
		// asking for another claim's is refused, and counted.
		return refuse(http.StatusForbidden, ResultWrongIdentity, "this SVID is not the named claim's")
	}
	return m, nil
}

// Request is what a machine may send: nothing, or the claim it believes it
// is (namespace/name), which must then be the SVID's.
type Request struct {
	Claim string `json:"claim,omitempty"`
}

// parseRequest decodes an empty body or one Request, strictly.
func parseRequest(body []byte) (Request, error) {
	var req Request
	if len(bytes.TrimSpace(body)) == 0 {
		return req, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, errors.New(`the request body is not {"claim": "<namespace>/<name>"}`)
	}
	if dec.More() {
		return req, errors.New("the request body holds more than one JSON value")
	}
	return req, nil
}

// credentialsRef is the claim's credentials Secret key, else its
// template's; nil when the workload has none.
func (e *Endpoint) credentialsRef(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) (*meta.SecretKeyReference, error) {
	if claim.Spec.CredentialsSecretRef != nil {
		return claim.Spec.CredentialsSecretRef, nil
	}
	if !claim.Spec.TemplateRef.IsMachineTemplate() {
		// Not a HypervisorMachineTemplate's claim: a template of that name
		// is somebody else's, and its workload none of this claim's.
		return nil, nil
	}
	t := &hypervisorv1alpha1.HypervisorMachineTemplate{}
	if err := e.Reader.Get(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: claim.Spec.TemplateRef.Name}, t); err != nil {
		return nil, err
	}
	if w := t.Spec.Workload; w != nil {
		return w.CredentialsSecretRef, nil
	}
	return nil, nil
}

// read returns the credentials as the JSON object the machine decodes.
func (e *Endpoint) read(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim, ref *meta.SecretKeyReference) ([]byte, error) {
	secret, err := e.Credentials.ClaimSecret(ctx, types.NamespacedName{Namespace: claim.Namespace, Name: ref.Name}, "spec.credentialsSecretRef", claim)
	if err != nil {
		return nil, err
	}
	data, ok := secret.Data[ref.Key]
	if !ok {
		return nil, fmt.Errorf("the Secret %s has no key %q", ref.Name, ref.Key)
	}
	var creds spire.Credentials
	if err := json.Unmarshal(data, &creds); err != nil {
		// Not the decoder's error: it may quote the Secret's content.
		return nil, fmt.Errorf("the Secret %s key %s is not a JSON object of strings", ref.Name, ref.Key)
	}
	return json.Marshal(creds)
}

// record writes the hand-out (or the check-in) to the claim's status, with
// the resourceVersion read: a concurrent request that read the same
// version loses, so credentials go out once.
func (e *Endpoint) record(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim, now time.Time, released bool) error {
	patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
	st := claim.Status.Attestation
	t := metav1.NewTime(now)
	if st.AttestedTime == nil {
		st.AttestedTime = &t
	}
	st.Phase = hypervisorv1alpha1.AttestationAttested
	if released {
		st.CredentialsReleasedTime = &t
		st.Phase = hypervisorv1alpha1.AttestationCredentialsReleased
	}
	return e.Client.Status().Patch(ctx, claim, patch)
}

// Serve runs the endpoint on addr (TLS with the operator's SVID; only
// clients with an SVID of the identity's trust domain get past the
// handshake) until ctx ends. Identity must be renewed by its own Run.
func (e *Endpoint) Serve(ctx context.Context, addr string, id *Identity) error {
	cfg := tlsconfig.MTLSServerConfig(id, id, tlsconfig.AuthorizeMemberOf(id.ID().TrustDomain()))
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("credential endpoint: %w", err)
	}
	srv := &http.Server{Handler: e, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
