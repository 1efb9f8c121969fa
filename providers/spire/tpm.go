package spire

import (
	"context"
	"fmt"
	"strings"

	agentv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/agent/v1"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyperfleet/hyperfleet/providers"
)

// TPM attestation (SPIRE's tpm_devid node attestor): the agent's own ID is
// /spire/agent/tpm_devid/<DevID certificate fingerprint>, unknown until it
// attests, so the machine is bound by a node alias on the server's ID
// (/spire/server) that selects the agent by its DevID certificate's subject
// CN. Nothing is secret in it: only a TPM holding that DevID's key, under an
// endorsement key the server's manufacturer CAs vouch for, attests.
const (
	tpmAgentPath = "/spire/agent/tpm_devid/"
	serverPath   = "/spire/server"
	// TPMSelectorType is the tpm_devid attestor's selector type.
	TPMSelectorType = "tpm_devid"
	subjectCNPrefix = "subject:cn:"
)

// TPMSelector is the node selector of an agent whose DevID certificate has
// subject CN commonName.
func TPMSelector(commonName string) Selector {
	return Selector{Type: TPMSelectorType, Value: subjectCNPrefix + commonName}
}

// validCommonName: what a DevID subject CN may be here: 1–64 characters
// (X.520's upper bound) of letters, digits, "." "-" "_" — a claim UID is.
func validCommonName(cn string) error {
	if len(cn) > 64 {
		return fmt.Errorf("%w: DevID subject CN %q is longer than 64 characters", ErrInvalidID, cn)
	}
	if err := validSegment(cn); err != nil {
		return fmt.Errorf("%w: DevID subject CN: %w", ErrInvalidID, err)
	}
	return nil
}

func (c *Client) CreateTPMAlias(ctx context.Context, machine MachineID, commonName string) (Entry, error) {
	if err := c.own(machine); err != nil {
		return Entry{}, err
	}
	if err := validCommonName(commonName); err != nil {
		return Entry{}, err
	}
	sel := TPMSelector(commonName)
	e := &types.Entry{
		SpiffeId:  &types.SPIFFEID{TrustDomain: c.trustDomain, Path: machine.Path()},
		ParentId:  &types.SPIFFEID{TrustDomain: c.trustDomain, Path: serverPath},
		Selectors: []*types.Selector{{Type: sel.Type, Value: sel.Value}},
	}
	return c.createEntry(ctx, e, "TPM alias of "+machine.String())
}

// tpmAlias reports whether e is a TPM node alias of one of this
// installation's machines, and the DevID subject CN it selects.
func (c *Client) tpmAlias(e *types.Entry) (MachineID, string, bool) {
	if e.GetParentId().GetPath() != serverPath || len(e.GetSelectors()) != 1 {
		return MachineID{}, "", false
	}
	s := e.GetSelectors()[0]
	cn, ok := strings.CutPrefix(s.GetValue(), subjectCNPrefix)
	if s.GetType() != TPMSelectorType || !ok {
		return MachineID{}, "", false
	}
	m, workload, err := ParseID(spiffeID(e.GetSpiffeId()))
	if err != nil || workload != "" || m.TrustDomain != c.trustDomain || m.Installation != c.installation {
		return MachineID{}, "", false
	}
	return m, cn, true
}

// eachTPMAgent calls f with every attested tpm_devid agent whose DevID has
// subject CN commonName.
func (c *Client) eachTPMAgent(ctx context.Context, commonName string, f func(*types.Agent)) error {
	sel := TPMSelector(commonName)
	return c.eachAgent(ctx, &agentv1.ListAgentsRequest_Filter{
		ByAttestationType: TPMSelectorType,
		BySelectorMatch: &types.SelectorMatch{
			Selectors: []*types.Selector{{Type: sel.Type, Value: sel.Value}},
			Match:     types.SelectorMatch_MATCH_SUPERSET,
		},
	}, f)
}

// forgetTPMAlias deletes the agents the alias selects, then the alias: while
// it is left, a retry still finds them.
func (c *Client) forgetTPMAlias(ctx context.Context, entryID, commonName string) error {
	var agents []*types.SPIFFEID
	if err := c.eachTPMAgent(ctx, commonName, func(a *types.Agent) { agents = append(agents, a.GetId()) }); err != nil {
		return err
	}
	for _, id := range agents {
		if _, err := c.agents.DeleteAgent(ctx, &agentv1.DeleteAgentRequest{Id: id}); err != nil && status.Code(err) != codes.NotFound {
			return apiError("delete agent", err)
		}
	}
	return c.DeleteEntry(ctx, entryID)
}

// evictTPMAgent is EvictAgent for a tpm_devid agent: it is ours when one of
// our TPM aliases selects it.
func (c *Client) evictTPMAgent(ctx context.Context, id *types.SPIFFEID) error {
	a, err := c.agents.GetAgent(ctx, &agentv1.GetAgentRequest{Id: id})
	if status.Code(err) == codes.NotFound {
		return nil
	} else if err != nil {
		return apiError("get agent", err)
	}
	for _, s := range a.GetSelectors() {
		cn, ok := strings.CutPrefix(s.GetValue(), subjectCNPrefix)
		if s.GetType() != TPMSelectorType || !ok {
			continue
		}
		var aliases []string
		if err := c.eachEntry(ctx, &entryv1.ListEntriesRequest_Filter{
			ByParentId:  &types.SPIFFEID{TrustDomain: c.trustDomain, Path: serverPath},
			BySelectors: &types.SelectorMatch{Selectors: []*types.Selector{{Type: s.GetType(), Value: s.GetValue()}}, Match: types.SelectorMatch_MATCH_EXACT},
		}, func(e *types.Entry) {
			if _, got, ok := c.tpmAlias(e); ok && got == cn {
				aliases = append(aliases, e.GetId())
			}
		}); err != nil {
			return err
		}
		for _, eid := range aliases {
			if err := c.forgetTPMAlias(ctx, eid, cn); err != nil {
				return err
			}
		}
		if len(aliases) > 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: the TPM agent is not selected by a machine alias under %s", providers.ErrNotOwned, c.prefix())
}
