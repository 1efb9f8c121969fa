package machineclaim

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// Reasons of attestation.
const (
	ReasonAttestationFailed   = "AttestationFailed"
	ReasonSPIRENotConfigured  = "SPIRENotConfigured"
	ReasonSPIREUnavailable    = "SPIREUnavailable"
	ReasonAttestationPending  = "AttestationPending"
	ReasonUnsupportedMethod   = "AttestationMethodUnsupported"
	ReasonUserDataUnsupported = "UserDataUnsupported"
)

// ConditionAttested tells how far the machine is in proving its identity.
const ConditionAttested = "Attested"

// Keys of the claim's attestation Secret.
const (
	joinTokenKey   = "joinToken"
	trustBundleKey = "trustBundle"
	expiresKey     = "expiresAt"
	spiffeIDKey    = "spiffeID"
	methodKey      = "method"
)

// attestationSecretName is the Secret holding the claim's join token: the
// claim's name and a suffix, hashed down when that would not fit.
func attestationSecretName(c *hypervisorv1alpha1.MachineClaim) string {
	const suffix = "-attestation"
	if len(c.Name)+len(suffix) <= 253 {
		return c.Name + suffix
	}
	sum := sha256.Sum256([]byte(c.Name))
	return c.Name[:253-len(suffix)-9] + "-" + hex.EncodeToString(sum[:4]) + suffix
}

// machineID is the claim's machine in SPIFFE terms.
func machineID(c *hypervisorv1alpha1.MachineClaim, trustDomain, installation string) spire.MachineID {
	return spire.MachineID{TrustDomain: trustDomain, Installation: installation, Kind: attestation.MachineKind,
		Namespace: c.Namespace, Name: c.Name, UID: string(c.UID)}
}

func attesting(t *hypervisorv1alpha1.HypervisorMachineTemplate) bool {
	a := t.Spec.Attestation
	return a != nil && a.Method != "" && a.Method != hypervisorv1alpha1.AttestationNone
}

// attest prepares a claim whose template asks for attestation, before its
// machine is made: a workload entry for the machine's bootstrap agent, a
// single-use join token bound to the machine's SPIFFE ID (kept in a Secret
// the claim owns, so a restart reuses it instead of minting another), and
// the user-data part that carries them. Nothing of a workload's credentials
// goes to the machine here: the credential endpoint hands them out once the
// machine proves it is this claim's.
func (r *Reconciler) attest(ctx context.Context, s *scope) (skeleton.Result, error) {
	c, t := s.claim, s.template
	if !attesting(t) || r.started(c) || standby.IsWarm(c) {
		// A warm standby machine never boots as itself: the claim that
		// takes it attests it as its own. A started machine has its user
		// data: the Secret's read is not kept for it.
		r.attestSecrets.Forget(client.ObjectKeyFromObject(c))
		return skeleton.Continue(), nil
	}
	a := t.Spec.Attestation
	stall := func(reason, msg string) (skeleton.Result, error) {
		s.blocked = &blocker{state: conditions.Stalled, reason: reason, message: msg}
		return skeleton.StopAndRequeue(r.backoff.next(c, time.Minute)), nil
	}
	if a.Method != hypervisorv1alpha1.AttestationJoinToken && a.Method != hypervisorv1alpha1.AttestationTPM {
		return stall(ReasonUnsupportedMethod, fmt.Sprintf("template %s asks for spec.attestation.method %s, which this version of HyperFleet does not know; use join-token or tpm", t.Name, a.Method))
	}
	reg := r.Attestation
	if reg == nil {
		return stall(ReasonSPIRENotConfigured, fmt.Sprintf("template %s asks for attestation, and the operator runs without SPIRE: start it with --spire-admin-socket and --credential-endpoint-url (docs/attestation.md)", t.Name))
	}
	server, err := reg.Server(ctx, a.SPIRE)
	if err != nil {
		return stall(ReasonSPIRENotConfigured, fmt.Sprintf("template %s: %v", t.Name, err))
	}
	if reg.EndpointURL == "" {
		return stall(ReasonSPIRENotConfigured, fmt.Sprintf("template %s asks for attestation, and the operator has no credential endpoint machines can reach: start it with --credential-endpoint-url", t.Name))
	}
	if reg.EndpointTrustDomain != a.SPIRE.TrustDomain {
		return stall(ReasonSPIRENotConfigured, fmt.Sprintf("template %s names trust domain %s, and the credential endpoint accepts SVIDs of %s only (--spire-trust-domain): machines of %s could never fetch anything", t.Name, a.SPIRE.TrustDomain, reg.EndpointTrustDomain, a.SPIRE.TrustDomain))
	}
	m := machineID(c, a.SPIRE.TrustDomain, reg.Installation)
	workload, err := m.Workload(spire.BootstrapWorkload)
	if err != nil {
		return stall(ReasonAttestationFailed, fmt.Sprintf("the claim's SPIFFE ID: %v", err))
	}
	mc := spire.MachineConfig{Method: methodOf(a.Method), ServerAddress: a.SPIRE.ServerAddress, TrustDomain: a.SPIRE.TrustDomain, SPIFFEID: workload,
		CredentialEndpoint: reg.EndpointURL + spire.CredentialsPath, EndpointID: spire.EndpointID(a.SPIRE.TrustDomain, reg.Installation)}
	secret, err := r.attestationSecret(ctx, c)
	if err != nil {
		return skeleton.Stop(), err
	}
	if secret != nil && (string(secret.Data[spiffeIDKey]) != workload || cmp.Or(string(secret.Data[methodKey]), spire.MethodJoinToken) != mc.Method) {
		// The template's trust domain or method changed before the machine
		// started: the token or alias leads to the old ID, or is of no use.
		// A new one is made.
		uid := secret.UID
		r.attestSecrets.Forget(client.ObjectKeyFromObject(c))
		if err := r.Client.Delete(ctx, secret, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return skeleton.Stop(), err
		}
		secret = nil
	}
	if secret == nil {
		if secret, err = r.register(ctx, s, server, m, workload); err != nil {
			return r.spireError(s, err)
		}
	}
	mc.JoinToken, mc.TrustBundle = string(secret.Data[joinTokenKey]), string(secret.Data[trustBundleKey])
	expires, _ := time.Parse(time.RFC3339, string(secret.Data[expiresKey]))
	exp := metav1.NewTime(expires)
	if st := c.Status.Attestation; st == nil || st.SPIFFEID != workload {
		c.Status.Attestation = &hypervisorv1alpha1.MachineAttestationStatus{Phase: hypervisorv1alpha1.AttestationPending,
			Method: a.Method, SPIFFEID: workload, TokenExpiryTime: &exp}
	}
	s.machineConfig = &mc
	if t.Spec.Workload == nil || t.Spec.Workload.Type == hypervisorv1alpha1.WorkloadNone || t.Spec.Workload.Type == "" {
		// Nothing else on the machine fetches anything: the agent attests,
		// checks in and keeps the machine's identity.
		s.attestRun = []string{reg.AgentPathOrDefault(), "attest"}
	}
	return skeleton.Continue(), nil
}

// attestationSecret reads the claim's token Secret (uncached: it was
// perhaps written a moment ago); nil when there is none of this claim's.
// What was read or made is kept until the machine starts: a claim waiting
// for a clone slot is reconciled again and again, and each read the
// Secret anew (measured: 850 GETs for 100 standby claims refilled in a
// burst, the burst's largest single cost).
func (r *Reconciler) attestationSecret(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) (*corev1.Secret, error) {
	if kept, ok := r.attestSecrets.Load(c); ok {
		return kept, nil
	}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: attestationSecretName(c)}, secret)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if owner := metav1.GetControllerOf(secret); owner == nil || owner.UID != c.UID {
		return nil, fmt.Errorf("the Secret %s is not this claim's (a claim of the same name before it?); it is left as it is", secret.Name)
	}
	return r.keepAttestationSecret(c, secret), nil
}

// keepAttestationSecret keeps the name, UID and data of the claim's token
// Secret (attestationSecret) and returns what it kept.
func (r *Reconciler) keepAttestationSecret(c *hypervisorv1alpha1.MachineClaim, secret *corev1.Secret) *corev1.Secret {
	kept := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name, UID: secret.UID}, Data: secret.Data}
	r.attestSecrets.Store(c, kept)
	return kept
}

// methodOf is the MachineConfig's name of a method.
func methodOf(m hypervisorv1alpha1.AttestationMethod) string {
	if m == hypervisorv1alpha1.AttestationTPM {
		return spire.MethodTPM
	}
	return spire.MethodJoinToken
}

// register registers the bootstrap workload and what lets the machine's
// agent attest as the machine — a single-use join token, or for tpm a node
// alias selecting the agent whose TPM DevID names the claim's UID — then
// keeps them in the claim's Secret. The entry comes first and is
// idempotent; a token minted and then lost (the Secret's create failed)
// is never used, and its alias goes with the machine (ForgetMachine).
func (r *Reconciler) register(ctx context.Context, s *scope, server spire.Server, m spire.MachineID, workload string) (*corev1.Secret, error) {
	c, a := s.claim, s.template.Spec.Attestation
	if _, err := server.CreateEntry(ctx, spire.EntrySpec{SPIFFEID: workload, Parent: m, Selectors: r.Attestation.Selectors}); err != nil {
		return nil, err
	}
	bundle, err := r.trustBundle(ctx, c.Namespace, a.SPIRE, server)
	if err != nil {
		return nil, err
	}
	ttl := attestation.DefaultTokenTTL
	if a.SPIRE.TokenTTL != nil && a.SPIRE.TokenTTL.Duration > 0 {
		ttl = a.SPIRE.TokenTTL.Duration
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: attestationSecretName(c), Namespace: c.Namespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{trustBundleKey: bundle, spiffeIDKey: []byte(workload), methodKey: []byte(methodOf(a.Method))},
	}
	var event string
	if a.Method == hypervisorv1alpha1.AttestationTPM {
		// Nothing to hand the machine: its TPM holds its proof. The
		// deadline is the same window a token would have.
		if _, err := server.CreateTPMAlias(ctx, m, string(c.UID)); err != nil {
			return nil, err
		}
		deadline := s.now.Add(ttl)
		secret.Data[expiresKey] = []byte(deadline.UTC().Format(time.RFC3339))
		event = fmt.Sprintf("Registered %s for the agent whose TPM DevID certificate names %s (subject CN); it must attest by %s", m, c.UID, deadline.UTC().Format(time.RFC3339))
	} else {
		tok, err := server.CreateJoinToken(ctx, m, ttl)
		if err != nil {
			return nil, err
		}
		secret.Data[joinTokenKey] = []byte(tok.Value)
		secret.Data[expiresKey] = []byte(tok.ExpiresAt.UTC().Format(time.RFC3339))
		event = fmt.Sprintf("Issued a single-use join token for %s, valid until %s; the machine gets its credentials only after it attests", m, tok.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if err := controllerutil.SetControllerReference(c, secret, r.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Client.Create(providers.WithoutBodies(ctx), secret); err != nil {
		return nil, fmt.Errorf("keeping the machine's attestation in Secret %s: %w", secret.Name, err)
	}
	reason := "JoinTokenIssued"
	if a.Method == hypervisorv1alpha1.AttestationTPM {
		reason = "TPMAliasRegistered"
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, reason, "Attest", "%s", event)
	return secret, nil
}

// trustBundle is what the machine's agent verifies the SPIRE server with:
// the template's spec.attestation.spire.trustBundleRef, else the server's own.
func (r *Reconciler) trustBundle(ctx context.Context, namespace string, cfg *hypervisorv1alpha1.SPIREConfig, server spire.Server) ([]byte, error) {
	ref := cfg.TrustBundleRef
	if ref == nil {
		return server.TrustBundle(ctx)
	}
	return r.Credentials.Key(ctx, namespace, ref, "spec.attestation.spire.trustBundleRef", "TrustBundleNotFound")
}

// spireError: SPIRE down or slow, the claim waits with a condition and
// tries again; a refusal for good stalls it.
func (r *Reconciler) spireError(s *scope, err error) (skeleton.Result, error) {
	c := s.claim
	if p, ok := providers.IsPermanent(err); ok {
		s.blocked = &blocker{state: conditions.Stalled, reason: p.Reason, message: p.Message}
		return skeleton.StopAndRequeue(r.backoff.next(c, time.Minute)), nil
	}
	s.blocked = &blocker{state: conditions.Waiting, reason: ReasonSPIREUnavailable,
		message: fmt.Sprintf("the machine is not made until SPIRE answers: %v", err)}
	return skeleton.StopAndRequeue(r.backoff.next(c, providers.RetryAfter(err))), nil
}

// attestationDeadline fails a machine that has not attested by its token's
// expiry: it can no longer prove who it is, and never gets its credentials.
func (r *Reconciler) attestationDeadline(ctx context.Context, s *scope) (skeleton.Result, error) {
	st := s.claim.Status.Attestation
	if st == nil || st.Phase != hypervisorv1alpha1.AttestationPending || st.TokenExpiryTime == nil || s.now.Before(st.TokenExpiryTime.Time) {
		return skeleton.Continue(), nil
	}
	st.Phase = hypervisorv1alpha1.AttestationFailed
	r.Recorder.Eventf(s.claim, nil, corev1.EventTypeWarning, ReasonAttestationFailed, "Attest",
		"The machine did not attest %s; it is retired. Raise spec.attestation.spire.tokenTTL if machines take longer to boot", notAttestedBy(st.Method))
	return r.beginRetire(ctx, s, ReasonAttestationFailed, "the machine did not attest "+notAttestedBy(st.Method))
}

// notAttestedBy says which deadline a machine missed.
func notAttestedBy(m hypervisorv1alpha1.AttestationMethod) string {
	if m == hypervisorv1alpha1.AttestationTPM {
		return "with its TPM within spec.attestation.spire.tokenTTL (was its vTPM provisioned with a DevID for the claim's UID?)"
	}
	return "before its join token expired"
}

// forgetAttestation removes what SPIRE holds for the claim's machine (its
// entry, token alias and agent) and the token's Secret. Best effort: what
// is left, the attestation sweeper removes.
//
// The status may not say the claim attests: the token's Secret is made
// before the status that records it is written, and an operator stopped
// between the two leaves a claim whose Secret and SPIRE entry exist with
// no status.attestation. When the template attests, the machine's ID is
// then worked out as attest made it, and both are removed all the same.
func (r *Reconciler) forgetAttestation(ctx context.Context, c *hypervisorv1alpha1.MachineClaim, t *hypervisorv1alpha1.HypervisorMachineTemplate) {
	if r.Attestation == nil {
		return
	}
	var m spire.MachineID
	switch st := c.Status.Attestation; {
	case st != nil:
		var err error
		if m, _, err = spire.ParseID(st.SPIFFEID); err != nil {
			m = spire.MachineID{}
		}
	case t != nil && attesting(t) && t.Spec.Attestation.SPIRE != nil:
		m = machineID(c, t.Spec.Attestation.SPIRE.TrustDomain, r.Attestation.Installation)
	default:
		return
	}
	log := ctrl.LoggerFrom(ctx)
	if m.TrustDomain != "" {
		// The template names the server; once it is gone, the operator's
		// default server of the ID's trust domain is asked.
		cfg := &hypervisorv1alpha1.SPIREConfig{TrustDomain: m.TrustDomain}
		if t != nil && t.Spec.Attestation != nil && t.Spec.Attestation.SPIRE != nil && t.Spec.Attestation.SPIRE.TrustDomain == m.TrustDomain {
			cfg = t.Spec.Attestation.SPIRE
		}
		server, serr := r.Attestation.Server(ctx, cfg)
		if serr == nil {
			serr = server.ForgetMachine(ctx, m)
		}
		if serr != nil {
			log.Error(serr, "Removing the machine's SPIRE entries and agent failed; the attestation sweeper retries")
		}
	}
	r.attestSecrets.Forget(client.ObjectKeyFromObject(c))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: attestationSecretName(c)}}
	if err := r.Client.Delete(ctx, secret); err != nil && !apierrors.IsNotFound(err) {
		log.Error(err, "Deleting the claim's join-token Secret failed; the garbage collector deletes it with the claim")
	}
}

// attestedCondition mirrors status.attestation in the Attested condition.
func attestedCondition(c *hypervisorv1alpha1.MachineClaim) *metav1.Condition {
	st := c.Status.Attestation
	if st == nil {
		return nil
	}
	cond := &metav1.Condition{Type: ConditionAttested, ObservedGeneration: c.Generation}
	switch st.Phase {
	case hypervisorv1alpha1.AttestationAttested:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, "Attested", "the machine proved its identity "+st.SPIFFEID
	case hypervisorv1alpha1.AttestationCredentialsReleased:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, "CredentialsReleased", "the machine proved its identity "+st.SPIFFEID+" and received its credentials, once"
	case hypervisorv1alpha1.AttestationFailed:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonAttestationFailed, "the machine did not attest "+notAttestedBy(st.Method)
	default:
		how := "a join token was issued"
		if st.Method == hypervisorv1alpha1.AttestationTPM {
			how = "the machine's TPM DevID (subject CN " + string(c.UID) + ") was registered"
		}
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonAttestationPending, how+"; waiting for the machine's agent to attest and present "+st.SPIFFEID
	}
	return cond
}

// templateOf reads the claim's template for cleanup; nil once it is gone.
func (r *Reconciler) templateOf(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.HypervisorMachineTemplate {
	if !c.Spec.TemplateRef.IsMachineTemplate() {
		return nil // a Source's templates never attest
	}
	t := &hypervisorv1alpha1.HypervisorMachineTemplate{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.TemplateRef.Name}, t); err != nil {
		return nil
	}
	return t
}
