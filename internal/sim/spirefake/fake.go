// Package spirefake is an in-memory SPIRE server for reconciler tests: it
// keeps the contract of spire.Server (installation scoping, idempotency,
// single-use expiring join tokens) without a spire-server process. The
// contract tests in providers/spire run against it and the real server alike.
package spirefake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// Server is the shared state: the SPIRE server several installations' clients
// (Client) talk to.
type Server struct {
	TrustDomain string
	// Now is the server's clock; time.Now when nil.
	Now func() time.Time
	// Bundle is what TrustBundle returns: PEM certificates of the test's making.
	Bundle []byte

	mu      sync.Mutex
	tokens  map[string]time.Time // value → expiry
	minted  []string             // every token ever made, used or not
	entries map[string]spire.Entry
	agents  map[string]spire.Agent // agent ID → agent
	nextID  int
	ca      *ca
}

// NewServer returns an empty server of trustDomain.
func NewServer(trustDomain string) *Server {
	return &Server{TrustDomain: trustDomain, tokens: map[string]time.Time{}, entries: map[string]spire.Entry{}, agents: map[string]spire.Agent{}}
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// ErrTokenRefused: Attest was given a token that does not exist, was used, or expired.
var ErrTokenRefused = errors.New("join token does not exist, has already been used or expired")

// Attest plays an agent attesting with token, as the real server does it: the
// token is consumed whether or not it had expired. It returns the agent's ID.
func (s *Server) Attest(token string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	expiry, ok := s.tokens[token]
	delete(s.tokens, token)
	if !ok || expiry.Before(s.now()) {
		return "", ErrTokenRefused
	}
	id := agentID(s.TrustDomain, token)
	a := spire.Agent{ID: id, ExpiresAt: s.now().Add(time.Hour)}
	s.agents[id] = a
	return id, nil
}

// MintedTokens are the values of every join token the server made, used
// or not: what a test searches the operator's output for.
func (s *Server) MintedTokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.minted)
}

// Client returns a spire.Server of installation on s.
func (s *Server) Client(installation string) *Client {
	return &Client{s: s, installation: installation}
}

// Client is one installation's view of a Server.
type Client struct {
	s            *Server
	installation string
}

var _ spire.Server = (*Client)(nil)

func agentID(td, token string) string { return "spiffe://" + td + "/spire/agent/join_token/" + token }

func (c *Client) prefix() string { return spire.InstallationPrefix(c.s.TrustDomain, c.installation) }

func (c *Client) own(m spire.MachineID) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.TrustDomain != c.s.TrustDomain || m.Installation != c.installation {
		return fmt.Errorf("%w: %s is not under %s", providers.ErrNotOwned, m, c.prefix())
	}
	return nil
}

// aliasOf: the machine e aliases, when e is a node alias of this installation.
func (c *Client) aliasOf(e spire.Entry) (spire.MachineID, bool) {
	if !e.NodeAlias {
		return spire.MachineID{}, false
	}
	m, _, err := spire.ParseID(e.SPIFFEID)
	return m, err == nil && m.TrustDomain == c.s.TrustDomain && m.Installation == c.installation
}

func (c *Client) CreateJoinToken(_ context.Context, m spire.MachineID, ttl time.Duration) (spire.JoinToken, error) {
	if err := c.own(m); err != nil {
		return spire.JoinToken{}, err
	}
	if ttl < time.Second {
		return spire.JoinToken{}, fmt.Errorf("spirefake: join token TTL %s is under a second", ttl)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	value := hex.EncodeToString(b)
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	// The real server keeps whole seconds in what it reports, and the exact
	// expiry inside; so does this.
	expiry := c.s.now().Add(ttl.Truncate(time.Second))
	c.s.tokens[value] = expiry
	c.s.minted = append(c.s.minted, value)
	c.s.nextID++
	id := fmt.Sprintf("entry-%d", c.s.nextID)
	c.s.entries[id] = spire.Entry{ID: id, SPIFFEID: m.String(), ParentID: agentID(c.s.TrustDomain, value), NodeAlias: true,
		Selectors: []spire.Selector{{Type: "spiffe_id", Value: agentID(c.s.TrustDomain, value)}}}
	return spire.JoinToken{Value: value, ExpiresAt: time.Unix(expiry.Unix(), 0), Machine: m}, nil
}

func (c *Client) CreateTPMAlias(_ context.Context, m spire.MachineID, commonName string) (spire.Entry, error) {
	if err := c.own(m); err != nil {
		return spire.Entry{}, err
	}
	if commonName == "" {
		return spire.Entry{}, fmt.Errorf("%w: empty DevID subject CN", spire.ErrInvalidID)
	}
	return c.s.addEntry(spire.Entry{SPIFFEID: m.String(), ParentID: "spiffe://" + c.s.TrustDomain + "/spire/server",
		Selectors: []spire.Selector{spire.TPMSelector(commonName)}, NodeAlias: true}), nil
}

// addEntry stores want, or returns the entry of the same ID, parent and
// selectors already there, as the real server answers AlreadyExists.
func (s *Server) addEntry(want spire.Entry) spire.Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.entries {
		if e.SPIFFEID == want.SPIFFEID && e.ParentID == want.ParentID && sameSelectors(e.Selectors, want.Selectors) {
			return e
		}
	}
	s.nextID++
	want.ID = fmt.Sprintf("entry-%d", s.nextID)
	s.entries[want.ID] = want
	return want
}

func (c *Client) CreateEntry(_ context.Context, spec spire.EntrySpec) (spire.Entry, error) {
	if err := c.own(spec.Parent); err != nil {
		return spire.Entry{}, err
	}
	if !strings.HasPrefix(spec.SPIFFEID, c.prefix()) {
		return spire.Entry{}, fmt.Errorf("%w: entry SPIFFE ID %s is not under %s", providers.ErrNotOwned, spec.SPIFFEID, c.prefix())
	}
	if _, _, err := spire.ParseID(spec.SPIFFEID); err != nil {
		return spire.Entry{}, err
	}
	if len(spec.Selectors) == 0 {
		return spire.Entry{}, fmt.Errorf("spirefake: entry %s has no selectors", spec.SPIFFEID)
	}
	return c.s.addEntry(spire.Entry{SPIFFEID: spec.SPIFFEID, ParentID: spec.Parent.String(), Selectors: slices.Clone(spec.Selectors)}), nil
}

func sameSelectors(a, b []spire.Selector) bool {
	key := func(s []spire.Selector) []string {
		out := make([]string, 0, len(s))
		for _, x := range s {
			out = append(out, x.Type+":"+x.Value)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

func (c *Client) DeleteEntry(_ context.Context, id string) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	e, ok := c.s.entries[id]
	if !ok {
		return nil
	}
	if !strings.HasPrefix(e.SPIFFEID, c.prefix()) {
		return fmt.Errorf("%w: entry %s (%s) is not under %s", providers.ErrNotOwned, id, e.SPIFFEID, c.prefix())
	}
	delete(c.s.entries, id)
	return nil
}

func (c *Client) ListEntries(context.Context) ([]spire.Entry, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var out []spire.Entry
	for _, e := range c.s.entries {
		if strings.HasPrefix(e.SPIFFEID, c.prefix()) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (c *Client) ListAgents(context.Context) ([]spire.Agent, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var out []spire.Agent
	for _, e := range c.s.entries {
		m, ok := c.aliasOf(e)
		if a, attested := c.s.agents[e.ParentID]; ok && attested {
			a.Machine = m
			out = append(out, a)
		}
	}
	return out, nil
}

func (c *Client) EvictAgent(_ context.Context, id string) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	var mine []string
	others := 0
	for eid, e := range c.s.entries {
		if e.ParentID != id {
			continue
		}
		if _, ok := c.aliasOf(e); ok {
			mine = append(mine, eid)
		} else {
			others++
		}
	}
	if len(mine) == 0 {
		if _, ok := c.s.agents[id]; !ok {
			return nil
		}
		return fmt.Errorf("%w: the agent is not aliased to a machine under %s", providers.ErrNotOwned, c.prefix())
	}
	if others > 0 {
		return fmt.Errorf("%w: the agent also serves %d entries outside %s", providers.ErrNotOwned, others, c.prefix())
	}
	delete(c.s.agents, id)
	for _, eid := range mine {
		delete(c.s.entries, eid)
	}
	return nil
}

func (c *Client) TrustBundle(context.Context) ([]byte, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if len(c.s.Bundle) == 0 && c.s.ca != nil {
		// The authority MintX509SVID signed with, as a real server's bundle.
		return c.s.caPEM(), nil
	}
	if len(c.s.Bundle) == 0 {
		return nil, fmt.Errorf("spirefake: no trust bundle set: %w", providers.ErrNotFound)
	}
	return slices.Clone(c.s.Bundle), nil
}
