package attestation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// ErrNotConfigured: a template asks for attestation, and the operator has no
// way to reach the SPIRE server it names.
var ErrNotConfigured = errors.New("no SPIRE server configured")

// DefaultTokenTTL is a join token's lifetime when the template sets none
// (the API server defaults it to the same).
const DefaultTokenTTL = 10 * time.Minute

// Registry knows the SPIRE servers templates may name, and what every
// attested machine is told. One per operator process; safe for concurrent
// use.
type Registry struct {
	// Installation scopes every SPIFFE ID the operator mints.
	Installation string
	// AdminSocket is the SPIRE server admin socket used when a template's
	// spec.attestation.spire.adminSocketPath is empty (--spire-admin-socket).
	AdminSocket string
	// AllowedAdminSockets are the other admin sockets a template may name in
	// spec.attestation.spire.adminSocketPath (--spire-allowed-admin-socket).
	// A path in a template is a tenant's word for a file on the operator's
	// own machine: only sockets the platform's administrator listed are ever
	// dialled, never whatever a namespaced object names.
	AllowedAdminSockets []string
	// Dial connects to a server's admin socket; spire.DialSocket when nil
	// (tests give the fake).
	Dial func(socket, trustDomain, installation string) (spire.Server, error)
	// DialAdmin, when set, reaches the operator's server of trustDomain over
	// TCP as an admin workload (--spire-server-address with
	// --spire-admin-credentials), for templates that name no admin socket
	// while the operator has none either. It may return a new client when
	// the credentials were rotated.
	DialAdmin func(ctx context.Context, trustDomain string) (spire.Server, error)
	// EndpointURL is the credential endpoint as machines reach it
	// (--credential-endpoint-url, https://host:port); empty, machines are
	// told of none, and a workload with credentials cannot attest.
	EndpointURL string
	// EndpointTrustDomain is the only trust domain whose SVIDs the
	// credential endpoint accepts (--spire-trust-domain).
	EndpointTrustDomain string
	// Selectors match the bootstrap agent on a machine to its workload
	// entry: unix:uid:0 in a VM, where it runs as root
	// (--spire-workload-selector).
	Selectors []spire.Selector
	// AgentPath is hyperfleet-bootstrap's path on machines, which a
	// machine whose workload is none runs to attest (DefaultAgentPath).
	AgentPath string

	mu      sync.Mutex
	servers map[serverKey]spire.Server
}

// DefaultAgentPath is where machine images carry cmd/hyperfleet-bootstrap.
const DefaultAgentPath = "/usr/local/bin/hyperfleet-bootstrap"

// AgentPathOrDefault is AgentPath, or DefaultAgentPath when unset.
func (r *Registry) AgentPathOrDefault() string { return cmp.Or(r.AgentPath, DefaultAgentPath) }

type serverKey struct{ socket, trustDomain string }

// Server returns the client of the SPIRE server cfg names: its admin
// socket (the template's, else the operator's), dialled on first use, else
// the operator's server over TCP (DialAdmin). Without either it returns
// ErrNotConfigured, with what to set.
func (r *Registry) Server(ctx context.Context, cfg *hypervisorv1alpha1.SPIREConfig) (spire.Server, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: set spec.attestation.spire (serverAddress, trustDomain) on the template", ErrNotConfigured)
	}
	if p := cfg.AdminSocketPath; p != "" && p != r.AdminSocket && !slices.Contains(r.AllowedAdminSockets, p) {
		return nil, fmt.Errorf("%w: spec.attestation.spire.adminSocketPath %q is not one of the admin sockets the operator's administrator allowed (--spire-allowed-admin-socket): remove it to use the operator's SPIRE server, or ask them to allow it", ErrNotConfigured, p)
	}
	socket := cmp.Or(cfg.AdminSocketPath, r.AdminSocket)
	if socket == "" && r.DialAdmin != nil {
		return r.DialAdmin(ctx, cfg.TrustDomain)
	}
	if socket == "" {
		return nil, fmt.Errorf("%w: the operator cannot mint join tokens for trust domain %s: run it with --spire-server-address and --spire-admin-credentials (or --spire-admin-socket, the SPIRE server's admin socket mounted into its Pod), or set spec.attestation.spire.adminSocketPath", ErrNotConfigured, cfg.TrustDomain)
	}
	key := serverKey{socket: socket, trustDomain: cfg.TrustDomain}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.servers[key]; ok {
		return s, nil
	}
	dial := r.Dial
	if dial == nil {
		dial = func(socket, td, inst string) (spire.Server, error) { return spire.DialSocket(socket, td, inst) }
	}
	// The connection is lazy: dialling succeeds while the server is down,
	// and each call says whether it answers.
	s, err := dial(socket, cfg.TrustDomain, r.Installation)
	if err != nil {
		return nil, err
	}
	if r.servers == nil {
		r.servers = map[serverKey]spire.Server{}
	}
	r.servers[key] = s
	return s, nil
}

// dialled are the servers dialled so far through sockets, and the
// operator's own server (trustDomain, when set), for the sweeper.
func (r *Registry) dialled(ctx context.Context, trustDomain string) ([]spire.Server, error) {
	var own spire.Server
	if trustDomain != "" {
		s, err := r.Server(ctx, &hypervisorv1alpha1.SPIREConfig{TrustDomain: trustDomain})
		if err != nil {
			return nil, err
		}
		own = s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Collect(maps.Values(r.servers))
	if own != nil && !slices.Contains(out, own) {
		out = append(out, own)
	}
	return out, nil
}

// ParseSelectors parses "type:value" selectors, e.g. "unix:uid:0".
func ParseSelectors(in []string) ([]spire.Selector, error) {
	out := make([]spire.Selector, 0, len(in))
	for _, s := range in {
		t, v, ok := strings.Cut(s, ":")
		if !ok || t == "" || v == "" {
			return nil, fmt.Errorf("selector %q is not type:value, e.g. unix:uid:0", s)
		}
		out = append(out, spire.Selector{Type: t, Value: v})
	}
	return out, nil
}
