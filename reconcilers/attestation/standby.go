package attestation

import (
	"context"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// SPIFFEIDIndex indexes MachineClaims by status.attestation.spiffeID: how
// the endpoint finds the claim that took a standby machine, whose SVID
// still names the standby claim it attested as.
const SPIFFEIDIndex = "machineclaim.spiffeID"

// IndexSPIFFEID is the SPIFFEIDIndex function.
func IndexSPIFFEID(o client.Object) []string {
	c, ok := o.(*hypervisorv1alpha1.MachineClaim)
	if !ok {
		return nil
	}
	if id := IndexSPIFFEIDOf(c); id != "" {
		return []string{id}
	}
	return nil
}

// IndexSPIFFEIDOf is the SPIFFE ID claim c's status carries, or "".
func IndexSPIFFEIDOf(c *hypervisorv1alpha1.MachineClaim) string {
	if c.Status.Attestation == nil {
		return ""
	}
	return c.Status.Attestation.SPIFFEID
}

// defaultStandbyWait is Endpoint.StandbyWait's default: under the
// machine's 30 s request timeout.
const defaultStandbyWait = 20 * time.Second

// claimOf is the claim whose machine presents the SVID of machine m: the
// claim m names, or, for a standby machine a claim took, that claim (in
// m's namespace, never another: a standby claim binds only claims of its
// own). Claims are read past the cache; the cache only says where to look.
func (e *Endpoint) claimOf(ctx context.Context, m spire.MachineID, peer string) (*hypervisorv1alpha1.MachineClaim, *answer) {
	claim := &hypervisorv1alpha1.MachineClaim{}
	err := e.Reader.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, claim)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, &answer{code: http.StatusServiceUnavailable, result: ResultUnavailable, message: "try again"}
	}
	named := err == nil && string(claim.UID) == m.UID
	if named {
		if b, bound := standby.BoundTo(claim); bound {
			if taker := e.taker(ctx, m.Namespace, b.Name, b.UID, peer); taker != nil {
				return taker, nil
			}
		}
		return claim, nil
	}
	if taker := e.takerBySPIFFEID(ctx, m, peer); taker != nil {
		return taker, nil
	}
	if err != nil {
		return nil, &answer{code: http.StatusNotFound, result: ResultUnknown, message: "no such machine"}
	}
	return claim, nil // another claim under the name: refused by the identity check
}

// taker reads the claim named, and returns it when it holds the machine:
// its status carries the machine's SPIFFE ID.
func (e *Endpoint) taker(ctx context.Context, namespace, name string, uid types.UID, peer string) *hypervisorv1alpha1.MachineClaim {
	c := &hypervisorv1alpha1.MachineClaim{}
	if err := e.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, c); err != nil {
		return nil
	}
	if (uid != "" && c.UID != uid) || c.Status.Attestation == nil || c.Status.Attestation.SPIFFEID != peer || standby.IsStandby(c) {
		return nil
	}
	return c
}

// takerBySPIFFEID finds, once the standby claim is gone, the claim of m's
// namespace whose status carries m's SPIFFE ID: through the cache's index,
// and when the cache does not know it, through the claims as stored. The
// cache may lag the read that found the standby claim gone (the taker
// records the machine before it deletes the standby claim, but a fresh
// read can see the deletion before the cache sees the record); answered
// "no such machine" then, the machine would stop asking. The uncached list
// runs only for a machine whose own claim is gone.
func (e *Endpoint) takerBySPIFFEID(ctx context.Context, m spire.MachineID, peer string) *hypervisorv1alpha1.MachineClaim {
	if e.Cache != nil {
		var list hypervisorv1alpha1.MachineClaimList
		if err := e.Cache.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingFields{SPIFFEIDIndex: peer}); err == nil {
			if c := e.takerAmong(ctx, m, peer, list.Items); c != nil {
				return c
			}
		}
	}
	opts := []client.ListOption{client.InNamespace(m.Namespace), client.Limit(500)}
	for {
		var page hypervisorv1alpha1.MachineClaimList
		if err := e.Reader.List(ctx, &page, opts...); err != nil {
			return nil
		}
		var holding []hypervisorv1alpha1.MachineClaim
		for i := range page.Items {
			if IndexSPIFFEIDOf(&page.Items[i]) == peer {
				holding = append(holding, page.Items[i])
			}
		}
		if c := e.takerAmong(ctx, m, peer, holding); c != nil {
			return c
		}
		if page.Continue == "" {
			return nil
		}
		opts = append(opts[:2], client.Continue(page.Continue))
	}
}

// takerAmong is the first of claims, other than m's own, that holds the
// machine as stored.
func (e *Endpoint) takerAmong(ctx context.Context, m spire.MachineID, peer string, claims []hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.MachineClaim {
	for i := range claims {
		if string(claims[i].UID) == m.UID {
			continue
		}
		if c := e.taker(ctx, m.Namespace, claims[i].Name, claims[i].UID, peer); c != nil {
			return c
		}
	}
	return nil
}

// standby answers a standby machine: it holds no workload credential, and
// gets none. Its first request records that it attested (what makes it
// hot); then the request is held until a claim takes the machine — the
// claim's credentials are then handed out as any claim's — or StandbyWait
// passes, and the machine is told to ask again (202).
func (e *Endpoint) standby(ctx context.Context, sb *hypervisorv1alpha1.MachineClaim, m spire.MachineID, peer string) answer {
	if !sb.DeletionTimestamp.IsZero() || sb.Status.Phase == hypervisorv1alpha1.MachineStopping ||
		sb.Status.Phase == hypervisorv1alpha1.MachineTerminated || sb.Status.Phase == hypervisorv1alpha1.MachineFailed {
		return answer{code: http.StatusGone, result: ResultExpired, message: "the machine is ending"}
	}
	st := sb.Status.Attestation
	if st.AttestedTime == nil {
		now := e.now()
		if st.TokenExpiryTime == nil || !now.Before(st.TokenExpiryTime.Time) {
			return answer{code: http.StatusGone, result: ResultExpired, message: "past the machine's attestation deadline (its join token's expiry)"}
		}
		if err := e.record(ctx, sb, now, false); err != nil {
			return answer{code: http.StatusServiceUnavailable, result: ResultUnavailable, message: "try again"}
		}
		e.Recorder.Eventf(sb, nil, corev1.EventTypeNormal, "Attested", "Attest", "The standby machine proved its identity %s; it waits for a claim, holding no credential", peer)
	}
	if e.Cache == nil {
		return standbyAnswer
	}
	wait := e.StandbyWait
	if wait == 0 {
		wait = defaultStandbyWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	key := client.ObjectKeyFromObject(sb)
	for {
		select {
		case <-wctx.Done():
			return standbyAnswer
		case <-tick.C:
		}
		cached := &hypervisorv1alpha1.MachineClaim{}
		err := e.Cache.Get(wctx, key, cached)
		_, bound := standby.BoundTo(cached)
		if err == nil && cached.UID == sb.UID && !bound {
			continue
		}
		// Taken (or gone): the answer is the taker's, once it holds the
		// machine; until then, wait on.
		if claim, refused := e.claimOf(ctx, m, peer); refused == nil && !standby.IsStandby(claim) {
			return e.answerFor(ctx, claim, m, peer)
		}
	}
}

var standbyAnswer = answer{code: http.StatusAccepted, result: ResultStandby, message: "a standby machine: no claim has taken it yet; ask again"}
