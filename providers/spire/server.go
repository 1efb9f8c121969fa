package spire

import (
	"context"
	"time"
)

// Server is what HyperFleet needs of a SPIRE server. Every Client is bound to
// one trust domain and one installation: it creates IDs only under
// InstallationPrefix and lists only what carries it, so two installations
// sharing a SPIRE server never see or delete each other's agents or entries.
// Every call but CreateJoinToken is idempotent.
type Server interface {
	// CreateJoinToken mints a single-use join token valid for ttl (whole
	// seconds, at least one) and binds it to machine: the agent that attests
	// with it is aliased to machine's SPIFFE ID, so the machine's workload
	// entries (parent: machine) reach exactly that agent. Each call mints a
	// new token; an unused one expires with its TTL.
	CreateJoinToken(ctx context.Context, machine MachineID, ttl time.Duration) (JoinToken, error)

	// CreateTPMAlias binds machine to the agent that attests with SPIRE's
	// tpm_devid node attestor and a DevID certificate of subject CN
	// commonName (the claim's UID): a node alias on the server's ID that
	// selects that agent. Creating one that exists returns it.
	CreateTPMAlias(ctx context.Context, machine MachineID, commonName string) (Entry, error)

	// CreateEntry registers a workload. Creating an entry that already
	// exists (same SPIFFE ID, parent and selectors) returns the existing one.
	// The SPIFFE ID must be under the installation's prefix.
	CreateEntry(ctx context.Context, spec EntrySpec) (Entry, error)

	// DeleteEntry deletes the entry with this ID; an absent entry succeeds.
	// It refuses (providers.ErrNotOwned) an entry outside the installation.
	DeleteEntry(ctx context.Context, id string) error

	// ListEntries returns every entry whose SPIFFE ID is under the
	// installation's prefix: workload entries and the node aliases join
	// tokens made, for cleanup.
	ListEntries(ctx context.Context) ([]Entry, error)

	// ListAgents returns the attested agents aliased to one of the
	// installation's machines, for cleanup.
	ListAgents(ctx context.Context) ([]Agent, error)

	// EvictAgent deletes the agent (its SVID is no longer renewed, and a
	// join token cannot be reused to come back) and its node-alias entries.
	// An absent agent succeeds. It refuses (providers.ErrNotOwned) an agent
	// not aliased to one of the installation's machines.
	EvictAgent(ctx context.Context, agentID string) error

	// TrustBundle returns the trust domain's X.509 authorities as PEM: what
	// a machine's agent is given (trust_bundle_path) so it verifies the
	// server on first contact instead of trusting whatever answers.
	TrustBundle(ctx context.Context) ([]byte, error)

	// MintX509SVID signs csr (ASN.1 DER, its one URI SAN a SPIFFE ID under
	// the installation's prefix) for ttl (the server may shorten it): the
	// operator's own serving identity, for the credential endpoint machines
	// reach over mTLS. A CSR for any other ID is refused (ErrNotOwned).
	MintX509SVID(ctx context.Context, csr []byte, ttl time.Duration) (X509SVID, error)

	// ForgetMachine removes everything SPIRE holds for machine: its
	// workload entries, its node aliases (so an unused join token no longer
	// leads to it) and the agents aliased to it (evicted). Nothing left
	// succeeds, so it is safe to repeat.
	ForgetMachine(ctx context.Context, machine MachineID) error
}

// X509SVID is a minted SVID: the leaf first, then intermediates (DER).
type X509SVID struct {
	CertChain [][]byte
	ID        string
	ExpiresAt time.Time
}

// JoinToken is a secret: whoever holds it can attest as the machine until it
// is used or expires. String never shows the value, so printing a JoinToken
// (in logs, events, errors) does not leak it.
type JoinToken struct {
	// Value is handed to the machine's agent only (cloud-init user data).
	Value string
	// ExpiresAt is when the server stops accepting the token.
	ExpiresAt time.Time
	// Machine is the SPIFFE ID the agent will be aliased to.
	Machine MachineID
}

func (t JoinToken) String() string {
	return "join token for " + t.Machine.String() + " (expires " + t.ExpiresAt.UTC().Format(time.RFC3339) + ")"
}

// GoString keeps %#v from printing the value as well.
func (t JoinToken) GoString() string { return t.String() }

// Selector is a workload selector, e.g. {Type: "unix", Value: "uid:1001"}.
type Selector struct {
	Type, Value string
}

// EntrySpec is a registration entry to create.
type EntrySpec struct {
	// SPIFFEID the workload gets; under the installation's prefix
	// (MachineID.Workload).
	SPIFFEID string
	// Parent is the machine whose agent serves the workload.
	Parent MachineID
	// Selectors the agent matches the workload by; at least one.
	Selectors []Selector
	// X509SVIDTTL, when set, overrides the server's default SVID lifetime.
	X509SVIDTTL time.Duration
}

// Entry is a registration entry as the server holds it.
type Entry struct {
	// ID is the server's entry ID, for DeleteEntry.
	ID       string
	SPIFFEID string
	// ParentID is the parent's SPIFFE ID. For a join token's node alias it
	// is the agent's ID, which holds the token's value until the token is
	// used: never log it. For a TPM alias it is the server's.
	ParentID  string
	Selectors []Selector
	// NodeAlias marks a node alias: the entry a join token made (SPIFFEID
	// is a machine's, ParentID the agent's that attested or will attest with
	// it) or a TPM alias (CreateTPMAlias).
	NodeAlias bool
}

// Agent is an attested agent aliased to one of the installation's machines.
type Agent struct {
	// ID is the agent's own SPIFFE ID, for EvictAgent.
	ID string
	// Machine the agent is aliased to.
	Machine MachineID
	// ExpiresAt is when the agent's current SVID expires.
	ExpiresAt time.Time
	Banned    bool
}
