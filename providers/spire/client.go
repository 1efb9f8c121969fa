package spire

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	agentv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/agent/v1"
	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	svidv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/svid/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hyperfleet/hyperfleet/providers"
)

// joinTokenAgentPath is the path SPIRE gives an agent that attested with a
// join token: /spire/agent/join_token/<token>.
const joinTokenAgentPath = "/spire/agent/join_token/"

// pageSize bounds one list response; the lists page through the rest.
const pageSize = 500

// Client implements Server with the SPIRE server's admin gRPC API.
type Client struct {
	trustDomain  string
	installation string
	agents       agentv1.AgentClient
	entries      entryv1.EntryClient
	bundles      bundlev1.BundleClient
	svids        svidv1.SVIDClient
	close        func() error
}

var _ Server = (*Client)(nil)

// NewClient uses conn, which must reach the server's admin API: its local
// socket (DialSocket), or its TCP endpoint with mTLS as an admin workload.
// Every call through it has a deadline (CallTimeout, or WithCallTimeout's).
func NewClient(conn grpc.ClientConnInterface, trustDomain, installation string, opts ...Option) (*Client, error) {
	if err := validTrustDomain(trustDomain); err != nil {
		return nil, err
	}
	if err := validSegment(installation); err != nil {
		return nil, fmt.Errorf("%w: installation: %w", ErrInvalidID, err)
	}
	o := options{callTimeout: CallTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	conn = deadlineConn{ClientConnInterface: conn, timeout: o.callTimeout}
	return &Client{
		trustDomain:  trustDomain,
		installation: installation,
		agents:       agentv1.NewAgentClient(conn),
		entries:      entryv1.NewEntryClient(conn),
		bundles:      bundlev1.NewBundleClient(conn),
		svids:        svidv1.NewSVIDClient(conn),
		close:        func() error { return nil },
	}, nil
}

// DialSocket connects to the server's admin Unix socket (server.socket_path):
// the server authorizes every caller on it as an admin, so whoever can open
// the socket file administers the server, and nothing else is needed.
func DialSocket(path, trustDomain, installation string) (*Client, error) {
	return dial("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()), trustDomain, installation)
}

// dial makes a Client that owns its connection to target.
func dial(target string, creds grpc.DialOption, trustDomain, installation string) (*Client, error) {
	conn, err := grpc.NewClient(target, creds, connectParams())
	if err != nil {
		return nil, fmt.Errorf("spire: %s: %w", target, err)
	}
	c, err := NewClient(conn, trustDomain, installation)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	c.close = conn.Close
	return c, nil
}

// Close closes the connection DialSocket made.
func (c *Client) Close() error { return c.close() }

func (c *Client) prefix() string { return InstallationPrefix(c.trustDomain, c.installation) }

// own checks machine is a valid ID of this client's installation.
func (c *Client) own(machine MachineID) error {
	if err := machine.Validate(); err != nil {
		return err
	}
	if machine.TrustDomain != c.trustDomain || machine.Installation != c.installation {
		return fmt.Errorf("%w: %s is not under %s", providers.ErrNotOwned, machine, c.prefix())
	}
	return nil
}

func (c *Client) CreateJoinToken(ctx context.Context, machine MachineID, ttl time.Duration) (JoinToken, error) {
	if err := c.own(machine); err != nil {
		return JoinToken{}, err
	}
	secs, err := seconds(ttl)
	if err != nil || secs < 1 {
		return JoinToken{}, fmt.Errorf("spire: join token TTL %s is not between a second and %d seconds", ttl, math.MaxInt32)
	}
	tok, err := c.agents.CreateJoinToken(ctx, &agentv1.CreateJoinTokenRequest{
		Ttl:     secs,
		AgentId: &types.SPIFFEID{TrustDomain: c.trustDomain, Path: machine.Path()},
	})
	if err != nil {
		return JoinToken{}, apiError("create join token for "+machine.String(), err)
	}
	return JoinToken{Value: tok.GetValue(), ExpiresAt: time.Unix(tok.GetExpiresAt(), 0), Machine: machine}, nil
}

func (c *Client) CreateEntry(ctx context.Context, spec EntrySpec) (Entry, error) {
	if err := c.own(spec.Parent); err != nil {
		return Entry{}, err
	}
	if !strings.HasPrefix(spec.SPIFFEID, c.prefix()) {
		return Entry{}, fmt.Errorf("%w: entry SPIFFE ID %s is not under %s", providers.ErrNotOwned, spec.SPIFFEID, c.prefix())
	}
	if _, _, err := ParseID(spec.SPIFFEID); err != nil {
		return Entry{}, err
	}
	if len(spec.Selectors) == 0 {
		return Entry{}, fmt.Errorf("spire: entry %s has no selectors", spec.SPIFFEID)
	}
	svidTTL, err := seconds(spec.X509SVIDTTL)
	if err != nil {
		return Entry{}, fmt.Errorf("spire: entry %s: X.509 SVID TTL: %w", spec.SPIFFEID, err)
	}
	e := &types.Entry{
		SpiffeId:    &types.SPIFFEID{TrustDomain: c.trustDomain, Path: strings.TrimPrefix(spec.SPIFFEID, "spiffe://"+c.trustDomain)},
		ParentId:    &types.SPIFFEID{TrustDomain: c.trustDomain, Path: spec.Parent.Path()},
		X509SvidTtl: svidTTL,
	}
	for _, s := range spec.Selectors {
		e.Selectors = append(e.Selectors, &types.Selector{Type: s.Type, Value: s.Value})
	}
	return c.createEntry(ctx, e, "create entry "+spec.SPIFFEID)
}

// createEntry creates e, what naming it in errors. The server answers
// AlreadyExists with the existing entry: that is the idempotent success a
// retried create needs.
func (c *Client) createEntry(ctx context.Context, e *types.Entry, what string) (Entry, error) {
	resp, err := c.entries.BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{e}})
	if err != nil {
		return Entry{}, apiError(what, err)
	}
	if len(resp.GetResults()) != 1 {
		return Entry{}, fmt.Errorf("spire: %s: %d results for one entry", what, len(resp.GetResults()))
	}
	r := resp.GetResults()[0]
	switch code := statusCode(r.GetStatus()); code {
	case codes.OK, codes.AlreadyExists:
		if r.GetEntry().GetId() == "" {
			return Entry{}, fmt.Errorf("spire: %s: %s without the entry", what, code)
		}
		return c.entry(r.GetEntry()), nil
	default:
		return Entry{}, apiError(what, status.Error(code, r.GetStatus().GetMessage()))
	}
}

func (c *Client) DeleteEntry(ctx context.Context, id string) error {
	e, err := c.entries.GetEntry(ctx, &entryv1.GetEntryRequest{Id: id})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return apiError("get entry "+id, err)
	}
	if !strings.HasPrefix(spiffeID(e.GetSpiffeId()), c.prefix()) {
		return fmt.Errorf("%w: entry %s (%s) is not under %s", providers.ErrNotOwned, id, spiffeID(e.GetSpiffeId()), c.prefix())
	}
	resp, err := c.entries.BatchDeleteEntry(ctx, &entryv1.BatchDeleteEntryRequest{Ids: []string{id}})
	if err != nil {
		return apiError("delete entry "+id, err)
	}
	for _, r := range resp.GetResults() {
		if code := statusCode(r.GetStatus()); code != codes.OK && code != codes.NotFound {
			return apiError("delete entry "+id, status.Error(code, r.GetStatus().GetMessage()))
		}
	}
	return nil
}

func (c *Client) ListEntries(ctx context.Context) ([]Entry, error) {
	var out []Entry
	err := c.eachEntry(ctx, nil, func(e *types.Entry) {
		if strings.HasPrefix(spiffeID(e.GetSpiffeId()), c.prefix()) {
			out = append(out, c.entry(e))
		}
	})
	return out, err
}

// eachEntry pages through the entries the filter selects. The API has no
// prefix filter, so installation scoping is done here, on the client.
func (c *Client) eachEntry(ctx context.Context, filter *entryv1.ListEntriesRequest_Filter, f func(*types.Entry)) error {
	token := ""
	for {
		resp, err := c.entries.ListEntries(ctx, &entryv1.ListEntriesRequest{Filter: filter, PageSize: pageSize, PageToken: token})
		if err != nil {
			return apiError("list entries", err)
		}
		for _, e := range resp.GetEntries() {
			f(e)
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

func (c *Client) ListAgents(ctx context.Context) ([]Agent, error) {
	// An agent carries no mark of its own; it belongs to the installation
	// through a node alias: a join token's (parent: the agent), or a TPM
	// alias (parent: the server) that selects it by its DevID.
	aliases := map[string]MachineID{}
	tpm := map[string]MachineID{}
	if err := c.eachEntry(ctx, nil, func(e *types.Entry) {
		if m, ok := c.alias(e); ok {
			aliases[spiffeID(e.GetParentId())] = m
		} else if m, cn, ok := c.tpmAlias(e); ok {
			tpm[cn] = m
		}
	}); err != nil {
		return nil, err
	}
	var out []Agent
	add := func(a *types.Agent, m MachineID) {
		out = append(out, Agent{ID: spiffeID(a.GetId()), Machine: m, ExpiresAt: time.Unix(a.GetX509SvidExpiresAt(), 0), Banned: a.GetBanned()})
	}
	if err := c.eachAgent(ctx, &agentv1.ListAgentsRequest_Filter{ByAttestationType: "join_token"}, func(a *types.Agent) {
		if m, ok := aliases[spiffeID(a.GetId())]; ok {
			add(a, m)
		}
	}); err != nil {
		return nil, err
	}
	if len(tpm) == 0 {
		return out, nil
	}
	if err := c.eachAgent(ctx, &agentv1.ListAgentsRequest_Filter{ByAttestationType: TPMSelectorType}, func(a *types.Agent) {
		for _, s := range a.GetSelectors() {
			if cn, ok := strings.CutPrefix(s.GetValue(), subjectCNPrefix); ok && s.GetType() == TPMSelectorType {
				if m, ok := tpm[cn]; ok {
					add(a, m)
					return
				}
			}
		}
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// eachAgent calls f with every agent filter selects, page by page.
func (c *Client) eachAgent(ctx context.Context, filter *agentv1.ListAgentsRequest_Filter, f func(*types.Agent)) error {
	token := ""
	for {
		resp, err := c.agents.ListAgents(ctx, &agentv1.ListAgentsRequest{Filter: filter, PageSize: pageSize, PageToken: token})
		if err != nil {
			return apiError("list agents", err)
		}
		for _, a := range resp.GetAgents() {
			f(a)
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

func (c *Client) EvictAgent(ctx context.Context, agentID string) error {
	if fp, ok := strings.CutPrefix(agentID, "spiffe://"+c.trustDomain+tpmAgentPath); ok && fp != "" && !strings.Contains(fp, "/") {
		return c.evictTPMAgent(ctx, &types.SPIFFEID{TrustDomain: c.trustDomain, Path: tpmAgentPath + fp})
	}
	rest, ok := strings.CutPrefix(agentID, "spiffe://"+c.trustDomain+joinTokenAgentPath)
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return fmt.Errorf("%w: %q is neither a join-token nor a TPM agent of trust domain %s", providers.ErrNotOwned, agentID, c.trustDomain)
	}
	parent := &types.SPIFFEID{TrustDomain: c.trustDomain, Path: joinTokenAgentPath + rest}
	var mine, others []string
	if err := c.eachEntry(ctx, &entryv1.ListEntriesRequest_Filter{ByParentId: parent}, func(e *types.Entry) {
		if _, ok := c.alias(e); ok {
			mine = append(mine, e.GetId())
		} else {
			others = append(others, e.GetId())
		}
	}); err != nil {
		return err
	}
	if len(mine) == 0 {
		// Either an agent of another installation, or one already evicted
		// (its aliases gone). Only the second may succeed.
		if _, err := c.agents.GetAgent(ctx, &agentv1.GetAgentRequest{Id: parent}); status.Code(err) == codes.NotFound {
			return nil
		} else if err != nil {
			return apiError("get agent", err)
		}
		return fmt.Errorf("%w: the agent is not aliased to a machine under %s", providers.ErrNotOwned, c.prefix())
	}
	if len(others) > 0 {
		return fmt.Errorf("%w: the agent also serves %d entries outside %s", providers.ErrNotOwned, len(others), c.prefix())
	}
	if _, err := c.agents.DeleteAgent(ctx, &agentv1.DeleteAgentRequest{Id: parent}); err != nil && status.Code(err) != codes.NotFound {
		return apiError("delete agent", err)
	}
	// The aliases go last: while one is left, a retry still finds the agent ours.
	for _, id := range mine {
		if err := c.DeleteEntry(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) TrustBundle(ctx context.Context) ([]byte, error) {
	b, err := c.bundles.GetBundle(ctx, &bundlev1.GetBundleRequest{OutputMask: &types.BundleMask{X509Authorities: true}})
	if err != nil {
		return nil, apiError("get the trust bundle", err)
	}
	var out []byte
	for _, ca := range b.GetX509Authorities() {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.GetAsn1()})...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("spire: the trust bundle of %s has no X.509 authority: %w", c.trustDomain, providers.ErrNotFound)
	}
	return out, nil
}

// alias reports whether e is a node alias of one of this installation's
// machines, and which.
func (c *Client) alias(e *types.Entry) (MachineID, bool) {
	if !strings.HasPrefix(e.GetParentId().GetPath(), joinTokenAgentPath) {
		return MachineID{}, false
	}
	m, workload, err := ParseID(spiffeID(e.GetSpiffeId()))
	if err != nil || workload != "" || m.TrustDomain != c.trustDomain || m.Installation != c.installation {
		return MachineID{}, false
	}
	return m, true
}

func (c *Client) entry(e *types.Entry) Entry {
	out := Entry{ID: e.GetId(), SPIFFEID: spiffeID(e.GetSpiffeId()), ParentID: spiffeID(e.GetParentId())}
	for _, s := range e.GetSelectors() {
		out.Selectors = append(out.Selectors, Selector{Type: s.GetType(), Value: s.GetValue()})
	}
	_, out.NodeAlias = c.alias(e)
	if !out.NodeAlias {
		_, _, out.NodeAlias = c.tpmAlias(e)
	}
	return out
}

// statusCode is a batch result's gRPC code; one out of range is Unknown.
func statusCode(st *types.Status) codes.Code {
	c := st.GetCode()
	if c < 0 || c > int32(codes.Unauthenticated) {
		return codes.Unknown
	}
	return codes.Code(c)
}

// seconds is d in whole seconds, as the API's int32 fields carry durations.
func seconds(d time.Duration) (int32, error) {
	secs := d / time.Second
	if secs < 0 || secs > math.MaxInt32 {
		return 0, fmt.Errorf("%s is out of range", d)
	}
	return int32(secs), nil
}

func spiffeID(id *types.SPIFFEID) string {
	if id == nil {
		return ""
	}
	return "spiffe://" + id.GetTrustDomain() + id.GetPath()
}

// apiError sorts a gRPC failure into the providers' error kinds. The
// server's messages never carry a token's value, but what was asked for
// does not either: callers pass only IDs and names as what.
func apiError(what string, err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Errorf("spire: %s: %w: %w", what, providers.ErrNotFound, err)
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Canceled:
		return providers.Transient("SPIREUnavailable", 5*time.Second, fmt.Errorf("spire: %s: %w", what, err))
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition:
		return providers.Permanent("SPIRERefused", "the SPIRE server refused to "+what+"; check the server's configuration and HyperFleet's access to its admin API", err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("spire: %s: %w", what, err)
}

func (c *Client) ForgetMachine(ctx context.Context, machine MachineID) error {
	if err := c.own(machine); err != nil {
		return err
	}
	id := &types.SPIFFEID{TrustDomain: c.trustDomain, Path: machine.Path()}
	// The workload entries first: while an alias is left, the agent can
	// still be found and evicted by a retry.
	var workloads []string
	if err := c.eachEntry(ctx, &entryv1.ListEntriesRequest_Filter{ByParentId: id}, func(e *types.Entry) {
		workloads = append(workloads, e.GetId())
	}); err != nil {
		return err
	}
	for _, eid := range workloads {
		if err := c.DeleteEntry(ctx, eid); err != nil {
			return err
		}
	}
	agents := map[string]bool{}
	tpm := map[string]string{} // alias entry ID → DevID subject CN
	if err := c.eachEntry(ctx, &entryv1.ListEntriesRequest_Filter{BySpiffeId: id}, func(e *types.Entry) {
		if _, ok := c.alias(e); ok {
			agents[spiffeID(e.GetParentId())] = true
		} else if _, cn, ok := c.tpmAlias(e); ok {
			tpm[e.GetId()] = cn
		}
	}); err != nil {
		return err
	}
	for eid, cn := range tpm {
		if err := c.forgetTPMAlias(ctx, eid, cn); err != nil {
			return err
		}
	}
	// EvictAgent deletes the agent and its aliases; an alias whose token was
	// never used has no agent, and goes the same way.
	for agent := range agents {
		if err := c.EvictAgent(ctx, agent); err != nil {
			return err
		}
	}
	return nil
}
